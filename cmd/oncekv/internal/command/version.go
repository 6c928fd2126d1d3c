package command

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildVersion describes this binary from its build information: the
// module version (a tag for `go install ...@vX`, "(devel)" in a checkout),
// the VCS commit when known, and the Go version.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " commit " + rev[:min(12, len(rev))] + modified
	}
	return fmt.Sprintf("%s %s", v, bi.GoVersion)
}

func newVersion(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version, commit and Go version",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(o.out, "oncekv", buildVersion())
			return err
		},
	}
}
