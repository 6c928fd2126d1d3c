package command

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
)

func newCheck(o *options) *cobra.Command {
	c := &cobra.Command{
		Use:   "check",
		Short: "Run bbolt's consistency check and every oncekv invariant",
		Long: `check runs bbolt's page-level check and oncekv's invariants: every record
decodes (checksums), every expiry and due index entry matches its record and
back, unique indexes match their rows, outbox IDs match their events. It
exits 1 and lists the problems if anything is wrong.`,
		Example: `  oncekv check --db payments.db
  oncekv check --addr http://127.0.0.1:8081 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			problems, err := query(o, func(src inspect.Source) ([]inspect.Problem, error) {
				return src.Check(cmd.Context())
			})
			if err != nil {
				return err
			}
			if err := o.emit(problems, func(w io.Writer) {
				if len(problems) == 0 {
					fmt.Fprintln(w, "ok: no problems found")
					return
				}
				fmt.Fprintln(w, "CHECK\tPROBLEM")
				for _, p := range problems {
					fmt.Fprintf(w, "%s\t%s\n", p.Check, esc(p.Message))
				}
			}); err != nil {
				return err
			}
			if len(problems) > 0 {
				return fmt.Errorf("%d problems found", len(problems))
			}
			return nil
		},
	}
	addrFlag(c, o)
	return c
}
