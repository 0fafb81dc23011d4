package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is the release version, set at link time with
// -ldflags "-X main.version=v1.2.3". When empty, the module version from the
// build information is shown.
var version = ""

// versionInfo is what "probeopt version" prints.
type versionInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"` // VCS commit, when the build recorded it
	Modified bool   `json:"modified,omitempty"` // the work tree had changes
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if v.Version == "" {
			v.Version = "unknown"
		}
		return v
	}
	if v.Version == "" {
		v.Version = bi.Main.Version
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of probeopt",
		Args:  argsRange(0, 0, ""),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			v := buildVersion()
			w := cmd.OutOrStdout()
			if asJSON {
				if err := json.NewEncoder(w).Encode(v); err != nil {
					return fmt.Errorf("write JSON: %w", err)
				}
				return nil
			}
			rev := ""
			if v.Revision != "" {
				rev = " " + v.Revision
				if v.Modified {
					rev += "+modified"
				}
			}
			if _, err := fmt.Fprintf(w, "probeopt %s%s (%s %s)\n", v.Version, rev, v.Go, v.Platform); err != nil {
				return fmt.Errorf("write output: %w", err)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the version as a JSON object")
	return cmd
}
