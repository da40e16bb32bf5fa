package sysinfo

import "syscall"

// uname is the kernel release and machine of uname(2), empty when it fails.
func uname() (kernel, arch string) {
	var uts syscall.Utsname
	if err := syscall.Uname(&uts); err != nil {
		return "", ""
	}
	return cstr(uts.Release[:]), cstr(uts.Machine[:])
}

func cstr(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
