package config

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type sample struct {
	Name    string   `yaml:"name"`
	Every   Duration `yaml:"every"`
	Workers int      `yaml:"workers"`
}

func TestLoad(t *testing.T) {
	cases := []struct {
		name    string
		file    string
		want    sample
		wantErr []string // substrings of the error
	}{
		{name: "overlay keeps unset keys", file: "every: 2s\n",
			want: sample{Name: "default", Every: Duration(2 * time.Second), Workers: 4}},
		{name: "empty file keeps defaults", file: "",
			want: sample{Name: "default", Every: Duration(time.Second), Workers: 4}},
		{name: "unknown key", file: "workerz: 3\n",
			wantErr: []string{"test config", "workerz", "not found"}},
		{name: "bad duration", file: "every: soon\n",
			wantErr: []string{"line 1", `"soon" is not a duration`}},
		{name: "two documents", file: "name: a\n---\nname: b\n",
			wantErr: []string{"one YAML document"}},
		{name: "Go type names left out", file: "workers: many\n",
			wantErr: []string{"line 1", "`many`"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
			got := sample{Name: "default", Every: Duration(time.Second), Workers: 4}
			err := Load(path, "test config", &got)
			if len(c.wantErr) == 0 {
				if err != nil || got != c.want {
					t.Fatalf("Load = %+v, %v; want %+v", got, err, c.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load = %+v, want an error", got)
			}
			for _, s := range c.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "config.sample") {
				t.Errorf("error %q names a Go type", err)
			}
		})
	}
	if err := Load(filepath.Join(t.TempDir(), "missing.yaml"), "test config", &sample{}); err == nil ||
		!strings.Contains(err.Error(), "read test config") {
		t.Errorf("missing file: %v", err)
	}
}

func TestLoggerNilLogsNothing(t *testing.T) {
	l := Logger(nil)
	if l == nil || l.Enabled(context.Background(), slog.LevelError) {
		t.Fatalf("Logger(nil) = %v, want a logger that logs nothing", l)
	}
	own := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if Logger(own) != own {
		t.Fatal("Logger replaced a given logger")
	}
}
