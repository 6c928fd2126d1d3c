package command

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// noArgs and exactArgs are cobra's argument checks, reported as bad usage
// (exit 2) like an unknown flag.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q (see oncekv %s --help)", c.Name(), args, c.Name())
	}
	return nil
}

func exactArgs(n int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d argument(s), got %d (see oncekv %s --help)", c.Name(), n, len(args), c.CommandPath())
		}
		return nil
	}
}

// esc makes text stored on behalf of someone else (a provider's error, an
// event's topic) safe to print on a terminal: control characters, escape
// sequences included, are shown as Go escapes instead of being interpreted.
func esc(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c >= 0x80 {
			q := strconv.QuoteToGraphic(s)
			return strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`)
		}
	}
	return s
}
