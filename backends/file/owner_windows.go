package file

import "os"

// fileOwner: Windows files have no uid and gid (the agent runs on Linux;
// this lets the binary, the Terraform provider there, build).
func fileOwner(os.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }
