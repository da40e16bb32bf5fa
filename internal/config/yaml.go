// Package config reads GRID's YAML configuration files strictly, so a
// misspelt key is an error rather than a silently ignored setting.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// LoadYAML decodes the file at path into v, refusing unknown keys.
func LoadYAML(path string, v any) error {
	return Load(path, "config", v)
}

// Load is the one loader of GRID's config files (controller and agent): it
// decodes the YAML file at path over the values already in into (start
// from the package's DefaultConfig), so only the keys the file sets change.
// Unknown keys are errors, so a misspelt setting is not silently ignored; a
// file holds one document; an empty file keeps every value. kind names the
// file in errors ("agent config"). The result is not validated: the caller
// overlays its flags, then calls Validate.
func Load(path, kind string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", kind, err)
	}
	d := yaml.NewDecoder(bytes.NewReader(data))
	d.KnownFields(true)
	if err := d.Decode(into); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return fmt.Errorf("%s %s: %w", kind, path, cleanYAMLError(err))
	}
	var extra any
	if err := d.Decode(&extra); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s %s: a config file holds one YAML document", kind, path)
	}
	return nil
}

// typeInError is the Go type yaml names in its errors, which means nothing
// to whoever wrote the file.
var typeInError = regexp.MustCompile(` in type [A-Za-z0-9_.*\[\]]+`)

func cleanYAMLError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	msg = typeInError.ReplaceAllString(msg, "")
	return errors.New(msg)
}

// Logger gives a nil logger its one meaning in GRID's configs: nil logs
// nothing. (A library part that logged to slog.Default() unasked would
// write into its embedder's logs.)
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// Duration is a time.Duration written as "10s" in YAML.
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (examples: 500ms, 10s, 5m)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
