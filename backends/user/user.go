// Package user is the user backend: users, groups and SSH authorized keys.
//
// Accounts are changed with the host's own useradd, usermod, userdel,
// groupadd, groupmod and groupdel, run with exec and an argv (never a
// shell). Those tools take the locks (/etc/.pwd.lock, lckpwdf) that every
// other tool on the host honours, keep /etc/shadow and /etc/gshadow in
// step, apply login.defs (UID ranges, home skeleton) and run the
// distribution's hooks (nscd, SELinux contexts); writing the files here
// would have to redo all of that and would still race tools that do. State
// is read with getent (so users from NSS sources are seen as the host sees
// them) and id.
//
// authorized_keys is written by the backend: beneath the user's home
// through an os.Root, so a .ssh that the user made a symlink to some other
// place cannot lead the write out of the home, with .ssh 0700 and the file
// 0600, both owned by the user, as sshd's StrictModes requires. Keys are
// parsed with golang.org/x/crypto/ssh and compared by key, not by comment.
package user

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
)

// Param patterns.
const (
	// NamePattern is a portable user or group name (shadow-utils' default
	// rule, minus a trailing $): it cannot start with a dash, so it is
	// never read as an option.
	NamePattern = `^[a-z_][a-z0-9_-]{0,31}$`
	// ShellPattern and HomePattern are absolute paths of plain characters.
	ShellPattern = `^/[A-Za-z0-9_./+-]*$`
	HomePattern  = `^/[A-Za-z0-9_./+-]*$`
	// CommentPattern is a GECOS field: no colon (the passwd separator) and
	// no line breaks.
	CommentPattern = `^[^:\n\r]*$`
	// IDPattern is a uid or gid.
	IDPattern = `^[0-9]{1,10}$`
	// KeyPattern is one or more authorized_keys lines: a key type, its
	// base64 blob and an optional comment. Options (from=, command=) are
	// not accepted: a fleet-wide key with a forced command is a design
	// choice to make in the file backend, not here.
	KeyPattern = `^((ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]+={0,3}( [^\r\n]*)?(\n|$))+$`
)

// Options configure the backend; empty paths look up the usual names.
type Options struct {
	UseraddPath, UsermodPath, UserdelPath    string
	GroupaddPath, GroupmodPath, GroupdelPath string
	GetentPath, IDPath                       string
}

// Backend is the user backend.
type Backend struct {
	bin map[string]string
}

// New returns the user backend.
func New(opts Options) *Backend {
	b := &Backend{bin: map[string]string{}}
	for name, p := range map[string]string{
		"useradd": opts.UseraddPath, "usermod": opts.UsermodPath, "userdel": opts.UserdelPath,
		"groupadd": opts.GroupaddPath, "groupmod": opts.GroupmodPath, "groupdel": opts.GroupdelPath,
		"getent": opts.GetentPath, "id": opts.IDPath,
	} {
		if p == "" {
			p = name
		}
		b.bin[name] = p
	}
	return b
}

// Schema declares present, absent, group_present, group_absent and
// authorized_key.
func (*Backend) Schema() api.BackendSchema {
	name := api.ParamSchema{Name: "name", Type: api.TypeString, Required: true, Pattern: NamePattern, Description: "User name."}
	gname := api.ParamSchema{Name: "name", Type: api.TypeString, Required: true, Pattern: NamePattern, Description: "Group name."}
	return api.BackendSchema{
		Name:        "user",
		Description: "Local users, groups and SSH authorized keys, through the host's useradd/usermod/userdel and groupadd/groupmod/groupdel.",
		Actions: []api.ActionSchema{
			{Name: "present", Description: "Create the user, or change what differs from the params given (params left out are left as they are).",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{name,
					{Name: "uid", Type: api.TypeString, Pattern: IDPattern, Description: "User id; default: the next free one (new users), unchanged (existing)."},
					{Name: "group", Type: api.TypeString, Pattern: NamePattern, Description: "Primary group name (it must exist); default: the host's rule for new users."},
					{Name: "groups", Type: api.TypeList, Pattern: NamePattern, Description: "Supplementary groups (comma-separated; they must exist)."},
					{Name: "append", Type: api.TypeBool, Default: "false", Description: "Add groups to the user's supplementary groups instead of making them exactly the list."},
					{Name: "shell", Type: api.TypeString, Pattern: ShellPattern, Description: "Login shell."},
					{Name: "home", Type: api.TypeString, Pattern: HomePattern, Description: "Home directory (an existing user's files are not moved)."},
					{Name: "create_home", Type: api.TypeBool, Default: "true", Description: "Create the home directory of a new user."},
					{Name: "system", Type: api.TypeBool, Default: "false", Description: "Create a system user (uid from the system range); only when creating."},
					{Name: "comment", Type: api.TypeString, Pattern: CommentPattern, Description: "The GECOS comment (full name)."}}},
			{Name: "absent", Description: "Remove the user (dangerous: files it owns outside its home stay, owned by a bare uid).",
				Idempotent: true, CheckMode: true, Dangerous: true, Params: []api.ParamSchema{name,
					{Name: "remove_home", Type: api.TypeBool, Default: "false", Description: "Remove the home directory and mail spool too."}}},
			{Name: "group_present", Description: "Create the group, or change its gid.",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{gname,
					{Name: "gid", Type: api.TypeString, Pattern: IDPattern, Description: "Group id; default: the next free one (new groups), unchanged (existing)."},
					{Name: "system", Type: api.TypeBool, Default: "false", Description: "Create a system group; only when creating."}}},
			{Name: "group_absent", Description: "Remove the group (dangerous: files keep a bare gid; refused by the host when it is a user's primary group).",
				Idempotent: true, CheckMode: true, Dangerous: true, Params: []api.ParamSchema{gname}},
			{Name: "authorized_key", Description: "Add keys to a user's ~/.ssh/authorized_keys, remove them, or make them the only ones (exclusive); .ssh 0700 and the file 0600, owned by the user; check mode shows the diff.",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{
					{Name: "user", Type: api.TypeString, Required: true, Pattern: NamePattern, Description: "The user whose keys these are (it must exist)."},
					{Name: "key", Type: api.TypeString, Required: true, Pattern: KeyPattern, Description: "Public keys, one per line (type, base64, optional comment), as in authorized_keys without options."},
					{Name: "state", Type: api.TypeString, Enum: []string{"present", "absent", "exclusive"}, Default: "present",
						Description: "present adds the keys, absent removes them, exclusive makes them the only keys in the file."}}},
		},
	}
}

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	switch req.Action {
	case "present":
		return b.present(ctx, req)
	case "absent":
		return b.absent(ctx, req)
	case "group_present":
		return b.groupPresent(ctx, req)
	case "group_absent":
		return b.groupAbsent(ctx, req)
	case "authorized_key":
		return b.authorizedKey(ctx, req)
	}
	return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
}

// account is a passwd entry.
type account struct {
	name, comment, home, shell string
	uid, gid                   int
}

// errNotFound is getent's exit status 2: no such entry.
var errNotFound = errors.New("not found")

// run runs one of the backend's programs; stdout is returned, stderr goes
// into the error.
func (b *Backend) run(ctx context.Context, prog string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, b.bin[prog], args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	// The tools read no input; a closed stdin keeps one that would prompt
	// from hanging.
	cmd.Stdin = nil
	// Messages in English, for errors that say the same on every host.
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	err := cmd.Run()
	if ctx.Err() != nil {
		return "", fmt.Errorf("%s: %w", prog, context.Cause(ctx))
	}
	if errors.Is(err, exec.ErrNotFound) {
		return "", fmt.Errorf("%s is not installed on this host (useradd and the other account tools come with shadow-utils, the passwd package on Debian; getent with the C library, id with coreutils): %w", prog, err)
	}
	if err != nil {
		var exit *exec.ExitError
		if prog == "getent" && errors.As(err, &exit) && exit.ExitCode() == 2 {
			return "", errNotFound
		}
		return "", fmt.Errorf("%s %s: %w: %s", prog, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (b *Backend) lookupUser(ctx context.Context, name string) (*account, error) {
	out, err := b.run(ctx, "getent", "passwd", "--", name)
	if errors.Is(err, errNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f := strings.Split(strings.TrimRight(strings.SplitN(out, "\n", 2)[0], "\n"), ":")
	if len(f) != 7 {
		return nil, fmt.Errorf("getent passwd %s: unexpected line %q", name, out)
	}
	uid, err1 := strconv.Atoi(f[2])
	gid, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("getent passwd %s: bad uid or gid in %q", name, out)
	}
	return &account{name: f[0], uid: uid, gid: gid, comment: f[4], home: f[5], shell: f[6]}, nil
}

// lookupGroup returns a group's gid, or -1 when there is none.
func (b *Backend) lookupGroup(ctx context.Context, name string) (int, error) {
	out, err := b.run(ctx, "getent", "group", "--", name)
	if errors.Is(err, errNotFound) {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	f := strings.Split(strings.SplitN(out, "\n", 2)[0], ":")
	if len(f) < 3 {
		return 0, fmt.Errorf("getent group %s: unexpected line %q", name, out)
	}
	gid, err := strconv.Atoi(f[2])
	if err != nil {
		return 0, fmt.Errorf("getent group %s: bad gid in %q", name, out)
	}
	return gid, nil
}

// supplementary returns the user's groups other than its primary one, and
// the primary one's name.
func (b *Backend) supplementary(ctx context.Context, a *account) ([]string, string, error) {
	all, err := b.run(ctx, "id", "-Gn", "--", a.name)
	if err != nil {
		return nil, "", err
	}
	prim, err := b.run(ctx, "id", "-gn", "--", a.name)
	if err != nil {
		return nil, "", err
	}
	prim = strings.TrimSpace(prim)
	var out []string
	for _, g := range strings.Fields(all) {
		if g != prim && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out, prim, nil
}

func boolParam(p api.Params, name string) bool {
	v, _ := strconv.ParseBool(p[name])
	return v
}

// mustGroups checks that groups exist, so a typo is a clear error before
// anything changes, not a half-made user.
func (b *Backend) mustGroups(ctx context.Context, names ...string) error {
	for _, g := range names {
		gid, err := b.lookupGroup(ctx, g)
		if err != nil {
			return err
		}
		if gid < 0 {
			return fmt.Errorf("group %s does not exist (create it with user.group_present first)", g)
		}
	}
	return nil
}

// userArgs is the argv of useradd for a new user, or of usermod for the
// fields of cur that differ from the params (nil: nothing to change).
// changes names them for the output.
//
// A primary group named in groups is left out of the comparison: the
// user is in it either way, and counting it would make every run a
// change.
func userArgs(p api.Params, cur *account, curGroups []string, primary string, groupGID int) (args, changes []string) {
	set := func(flag, field, val string) {
		args = append(args, flag, val)
		changes = append(changes, field)
	}
	if cur == nil {
		if boolParam(p, "system") {
			args = append(args, "--system")
		}
		if boolParam(p, "create_home") {
			args = append(args, "--create-home")
		} else {
			args = append(args, "--no-create-home")
		}
		for _, f := range []struct{ param, flag string }{
			{"uid", "--uid"}, {"group", "--gid"}, {"shell", "--shell"}, {"home", "--home-dir"}, {"comment", "--comment"},
		} {
			if v, ok := p[f.param]; ok && v != "" {
				set(f.flag, f.param, v)
			}
		}
		if gs := api.SplitList(p["groups"]); len(gs) > 0 {
			set("--groups", "groups", strings.Join(gs, ","))
		}
		return append(args, "--", p["name"]), append([]string{"created"}, changes...)
	}
	if v := p["uid"]; v != "" && v != strconv.Itoa(cur.uid) {
		set("--uid", "uid", v)
	}
	if v := p["group"]; v != "" && groupGID != cur.gid {
		set("--gid", "group", v)
	}
	if v := p["shell"]; v != "" && v != cur.shell {
		set("--shell", "shell", v)
	}
	if v := p["home"]; v != "" && v != cur.home {
		set("--home", "home", v)
	}
	if v, ok := p["comment"]; ok && v != cur.comment {
		set("--comment", "comment", v)
	}
	if _, ok := p["groups"]; ok {
		if g := p["group"]; g != "" {
			primary = g
		}
		var want []string
		for _, g := range api.SplitList(p["groups"]) {
			if g != primary {
				want = append(want, g)
			}
		}
		slices.Sort(want)
		want = slices.Compact(want)
		if boolParam(p, "append") {
			var missing []string
			for _, g := range want {
				if !slices.Contains(curGroups, g) {
					missing = append(missing, g)
				}
			}
			if len(missing) > 0 {
				args = append(args, "--append")
				set("--groups", "groups", strings.Join(missing, ","))
			}
		} else if !slices.Equal(want, curGroups) {
			set("--groups", "groups", strings.Join(want, ","))
		}
	}
	if len(args) == 0 {
		return nil, nil
	}
	return append(args, "--", p["name"]), changes
}

func (b *Backend) present(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	p := req.Params
	name := p["name"]
	cur, err := b.lookupUser(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := notRoot(cur, p["uid"]); err != nil {
		return nil, err
	}
	var need []string
	if g := p["group"]; g != "" {
		need = append(need, g)
	}
	need = append(need, api.SplitList(p["groups"])...)
	if err := b.mustGroups(ctx, need...); err != nil {
		return nil, err
	}
	groupGID := -1
	if g := p["group"]; g != "" {
		if groupGID, err = b.lookupGroup(ctx, g); err != nil {
			return nil, err
		}
	}
	var curGroups []string
	var primary string
	if cur != nil {
		if curGroups, primary, err = b.supplementary(ctx, cur); err != nil {
			return nil, err
		}
	}
	if err := b.noRootGroups(ctx, need, curGroups, primary); err != nil {
		return nil, err
	}
	args, changes := userArgs(p, cur, curGroups, primary, groupGID)
	prog := "usermod"
	if cur == nil {
		prog = "useradd"
	}
	if args == nil {
		return &backends.Result{Output: "user " + name + " is up to date", Facts: facts(cur, curGroups)}, nil
	}
	if req.CheckMode {
		return &backends.Result{Output: fmt.Sprintf("check mode: would run %s %s", prog, strings.Join(args, " ")), Changed: true,
			Facts: map[string]any{"name": name, "changes": changes}}, nil
	}
	if _, err := b.run(ctx, prog, args...); err != nil {
		return nil, err
	}
	cur, err = b.lookupUser(ctx, name)
	if err != nil || cur == nil {
		return nil, fmt.Errorf("user %s after %s: %v", name, prog, err)
	}
	curGroups, _, err = b.supplementary(ctx, cur)
	if err != nil {
		return nil, err
	}
	f := facts(cur, curGroups)
	f["changes"] = changes
	return &backends.Result{Output: fmt.Sprintf("%s %s: %s", prog, name, strings.Join(changes, ", ")), Changed: true, Facts: f}, nil
}

// ErrRoot is a change to an account with uid 0, one that would make one,
// or one that adds a user to a root group: present and authorized_key are
// not dangerous, so anyone who may run jobs may run them, and keys, shell,
// home or groups of uid 0 are a root login given or root locked out, as
// sudo or wheel membership is root given. Those are left to the host's
// own provisioning.
var ErrRoot = errors.New("the user backend gives no account root (uid 0, or a root group)")

func notRoot(cur *account, uid string) error {
	if cur != nil && cur.uid == 0 {
		return fmt.Errorf("user %s has uid 0: %w", cur.name, ErrRoot)
	}
	if n, err := strconv.Atoi(uid); err == nil && n == 0 {
		return fmt.Errorf("uid 0: %w", ErrRoot)
	}
	return nil
}

// RootGroups are groups whose purpose is root: sudo's (Debian, Ubuntu),
// wheel (RHEL, Fedora, SUSE), admin (older Ubuntu). A group with gid 0 is
// one too. Other groups can be as good as root (docker, lxd, disk); the
// node's sudoers and such groups stay the host's to manage.
var RootGroups = []string{"sudo", "wheel", "admin"}

// noRootGroups refuses to put a user into a root group it is not in yet
// (a primary or supplementary group from need): that is root for whoever
// logs in as the user, which present, not being dangerous, must not give.
func (b *Backend) noRootGroups(ctx context.Context, need, curGroups []string, primary string) error {
	for _, g := range need {
		if g == primary || slices.Contains(curGroups, g) {
			continue
		}
		gid, err := b.lookupGroup(ctx, g)
		if err != nil {
			return err
		}
		if gid == 0 || slices.Contains(RootGroups, g) {
			return fmt.Errorf("group %s gives root: %w", g, ErrRoot)
		}
	}
	return nil
}

func facts(a *account, groups []string) map[string]any {
	if a == nil {
		return map[string]any{"exists": false}
	}
	if groups == nil {
		groups = []string{}
	}
	return map[string]any{"exists": true, "name": a.name, "uid": a.uid, "gid": a.gid, "home": a.home, "shell": a.shell, "comment": a.comment, "groups": groups}
}

func (b *Backend) absent(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	name := req.Params["name"]
	cur, err := b.lookupUser(ctx, name)
	if err != nil {
		return nil, err
	}
	if cur == nil {
		return &backends.Result{Output: "user " + name + " does not exist", Facts: facts(nil, nil)}, nil
	}
	args := []string{"--", name}
	if boolParam(req.Params, "remove_home") {
		args = append([]string{"--remove"}, args...)
	}
	if req.CheckMode {
		return &backends.Result{Output: "check mode: would run userdel " + strings.Join(args, " "), Changed: true, Facts: facts(cur, nil)}, nil
	}
	if _, err := b.run(ctx, "userdel", args...); err != nil {
		return nil, err
	}
	return &backends.Result{Output: "removed user " + name, Changed: true, Facts: facts(nil, nil)}, nil
}

func (b *Backend) groupPresent(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	name, want := req.Params["name"], req.Params["gid"]
	gid, err := b.lookupGroup(ctx, name)
	if err != nil {
		return nil, err
	}
	var prog string
	var args []string
	switch {
	case gid < 0:
		prog = "groupadd"
		if boolParam(req.Params, "system") {
			args = append(args, "--system")
		}
		if want != "" {
			args = append(args, "--gid", want)
		}
	case want != "" && want != strconv.Itoa(gid):
		prog, args = "groupmod", []string{"--gid", want}
	default:
		return &backends.Result{Output: "group " + name + " is up to date", Facts: map[string]any{"name": name, "gid": gid, "exists": true}}, nil
	}
	args = append(args, "--", name)
	if req.CheckMode {
		return &backends.Result{Output: fmt.Sprintf("check mode: would run %s %s", prog, strings.Join(args, " ")), Changed: true, Facts: map[string]any{"name": name}}, nil
	}
	if _, err := b.run(ctx, prog, args...); err != nil {
		return nil, err
	}
	if gid, err = b.lookupGroup(ctx, name); err != nil {
		return nil, err
	}
	return &backends.Result{Output: fmt.Sprintf("%s %s", prog, name), Changed: true, Facts: map[string]any{"name": name, "gid": gid, "exists": true}}, nil
}

func (b *Backend) groupAbsent(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	name := req.Params["name"]
	gid, err := b.lookupGroup(ctx, name)
	if err != nil {
		return nil, err
	}
	if gid < 0 {
		return &backends.Result{Output: "group " + name + " does not exist", Facts: map[string]any{"name": name, "exists": false}}, nil
	}
	if req.CheckMode {
		return &backends.Result{Output: "check mode: would run groupdel -- " + name, Changed: true, Facts: map[string]any{"name": name, "gid": gid}}, nil
	}
	if _, err := b.run(ctx, "groupdel", "--", name); err != nil {
		return nil, err
	}
	return &backends.Result{Output: "removed group " + name, Changed: true, Facts: map[string]any{"name": name, "exists": false}}, nil
}

// A user's ~/.ssh as sshd wants it.
const (
	sshDirMode  os.FileMode = 0o700
	keyFileMode os.FileMode = 0o600
)
