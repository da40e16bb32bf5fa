// Package config is the config backend: get, set and delete one key, named
// by a dotted path, in an INI, YAML, JSON or TOML file, leaving the rest of
// the file as the format's library writes it back. Files are reached only
// through the file backend (its allowed prefixes or sandbox, its os.Root
// confinement, its atomic replace and check-mode diff).
//
// Parsers, all maintained and widely used, none written here:
//   - INI: gopkg.in/ini.v1, which keeps comments, key order and sections.
//     The key's last dot separates it from its section: "server.port" is
//     port in [server]; a key without a dot is in the default section.
//   - YAML: go.yaml.in/yaml/v3 (the maintained yaml.v3) through its Node
//     API, which keeps comments, key order and scalar styles.
//   - JSON: encoding/json's tokenizer, building an ordered tree, so key
//     order is kept; JSON has no comments. The indent is the file's own.
//   - TOML: github.com/pelletier/go-toml/v2. It keeps values and types but
//     not comments or key order (it has no document model that writes
//     them back), so a set or delete in TOML rewrites the file in its
//     canonical layout; check mode's diff shows exactly that.
package config

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/file"
)

// Param patterns.
const (
	// KeyPattern is a dotted path of names: letters, digits, _ and -, each
	// starting with a letter, digit or _.
	KeyPattern = `^[A-Za-z0-9_][A-Za-z0-9_-]*(\.[A-Za-z0-9_][A-Za-z0-9_-]*)*$`
	// ValuePattern is one line.
	ValuePattern = `^[^\n\r]*$`
)

// Formats.
var formats = []string{"auto", "ini", "yaml", "json", "toml"}

// Backend is the config backend.
type Backend struct {
	files *file.Backend
}

// New returns the config backend working through files, which holds the
// allowed prefixes.
func New(files *file.Backend) *Backend { return &Backend{files: files} }

// Schema declares get, set and delete.
func (*Backend) Schema() api.BackendSchema {
	path := api.ParamSchema{Name: "path", Type: api.TypeString, Required: true, Pattern: file.PathPattern,
		Description: "Absolute path of the config file; must lie under one of the node's allowed file prefixes."}
	key := api.ParamSchema{Name: "key", Type: api.TypeString, Required: true, Pattern: KeyPattern,
		Description: "Dotted path of the key (INI: section.key; YAML, JSON, TOML: nested mapping keys)."}
	format := api.ParamSchema{Name: "format", Type: api.TypeString, Enum: formats, Default: "auto",
		Description: "File format; auto goes by the extension (.ini .conf .cfg, .yaml .yml, .json, .toml)."}
	return api.BackendSchema{
		Name:        "config",
		Description: "One key of an INI, YAML, JSON or TOML file under the node's allowed file prefixes, the rest of the file kept.",
		Actions: []api.ActionSchema{
			{Name: "get", Description: "Report whether the key exists and its value.",
				ReadOnly: true, Idempotent: true, CheckMode: true, Params: []api.ParamSchema{path, key, format}},
			{Name: "set", Description: "Set the key to a value, creating missing parent mappings; no change when it already has it; check mode shows the diff.",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{path, key, format,
					{Name: "value", Type: api.TypeString, Required: true, Pattern: ValuePattern, Description: "The value, one line."},
					{Name: "type", Type: api.TypeString, Enum: []string{"string", "int", "float", "bool"}, Default: "string",
						Description: "The value's type in YAML, JSON and TOML (INI values are all text)."},
					{Name: "create", Type: api.TypeBool, Default: "false", Description: "Create the file when it does not exist (otherwise that is an error)."},
					{Name: "mode", Type: api.TypeString, Pattern: file.ModePattern, Default: "0644", Description: "Permission bits in octal of a file created here; an existing file keeps its own."}}},
			{Name: "delete", Description: "Remove the key; no change when it is not there; check mode shows the diff.",
				Idempotent: true, CheckMode: true, Params: []api.ParamSchema{path, key, format}},
		},
	}
}

// doc is one parsed file in one format.
type doc interface {
	// get returns the key's value as text.
	get(path []string) (string, bool, error)
	// set sets the key; it reports whether anything changed.
	set(path []string, v value) (bool, error)
	// del removes the key; it reports whether it was there.
	del(path []string) (bool, error)
	render() (string, error)
}

// value is a typed value to set.
type value struct {
	text string
	typ  string
	// native is the value as Go would hold it after decoding JSON/TOML.
	native any
}

func parseValue(text, typ string) (value, error) {
	v := value{text: text, typ: typ, native: text}
	switch typ {
	case "int":
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return v, fmt.Errorf("value %q is not an int: %w", text, err)
		}
		v.native = n
	case "float":
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return v, fmt.Errorf("value %q is not a float: %w", text, err)
		}
		v.native = f
	case "bool":
		b, err := strconv.ParseBool(text)
		if err != nil {
			return v, fmt.Errorf("value %q is not a bool: %w", text, err)
		}
		v.native = b
		v.text = strconv.FormatBool(b)
	}
	return v, nil
}

func formatOf(path, format string) (string, error) {
	if format != "" && format != "auto" {
		return format, nil
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".ini", ".conf", ".cfg":
		return "ini", nil
	case ".yaml", ".yml":
		return "yaml", nil
	case ".json":
		return "json", nil
	case ".toml":
		return "toml", nil
	}
	return "", fmt.Errorf("cannot tell the format of %s from its extension: set format (ini, yaml, json or toml)", path)
}

func parse(format, data string) (doc, error) {
	var d doc
	var err error
	switch format {
	case "ini":
		d, err = parseINI(data)
	case "yaml":
		d, err = parseYAML(data)
	case "json":
		d, err = parseJSON(data)
	case "toml":
		d, err = parseTOML(data)
	default:
		return nil, fmt.Errorf("unknown format %q", format)
	}
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", format, err)
	}
	return d, nil
}

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	switch req.Action {
	case "get", "set", "delete":
	default:
		return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("config %s: %w", req.Action, context.Cause(ctx))
	}
	name, key := req.Params["path"], req.Params["key"]
	format, err := formatOf(name, req.Params["format"])
	if err != nil {
		return nil, err
	}
	path := strings.Split(key, ".")
	facts := map[string]any{"path": name, "key": key, "format": format}
	switch req.Action {
	case "get":
		data, exists, err := b.files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		if !exists {
			return nil, fmt.Errorf("%s does not exist", name)
		}
		d, err := parse(format, data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		v, ok, err := d.get(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		facts["exists"] = ok
		if !ok {
			return &backends.Result{Output: key + " is not set in " + name, Facts: facts}, nil
		}
		facts["value"] = v
		return &backends.Result{Output: v, Facts: facts}, nil
	case "set":
		v, err := parseValue(req.Params["value"], req.Params["type"])
		if err != nil {
			return nil, err
		}
		res, err := b.files.Edit(ctx, req, func(old string, exists bool) (string, bool, error) {
			if !exists {
				if c, _ := strconv.ParseBool(req.Params["create"]); !c {
					return "", false, fmt.Errorf("%s does not exist (set create=true to create it)", name)
				}
			}
			d, err := parse(format, old)
			if err != nil {
				return "", false, fmt.Errorf("%s: %w", name, err)
			}
			changed, err := d.set(path, v)
			if err != nil || (!changed && exists) {
				return "", false, err
			}
			out, err := d.render()
			return out, true, err
		})
		return withFacts(res, err, facts)
	default:
		res, err := b.files.Edit(ctx, req, func(old string, exists bool) (string, bool, error) {
			if !exists {
				return "", false, nil
			}
			d, err := parse(format, old)
			if err != nil {
				return "", false, fmt.Errorf("%s: %w", name, err)
			}
			found, err := d.del(path)
			if err != nil || !found {
				return "", false, err
			}
			out, err := d.render()
			return out, true, err
		})
		return withFacts(res, err, facts)
	}
}

func withFacts(res *backends.Result, err error, facts map[string]any) (*backends.Result, error) {
	if err != nil {
		return nil, err
	}
	for k, v := range res.Facts {
		facts[k] = v
	}
	res.Facts = facts
	return res, nil
}
