package command

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/ledger/inspect"
)

func newIntents(o *options) *cobra.Command {
	var state string
	c := &cobra.Command{
		Use:   "intents",
		Short: "List side-effect intents",
		Example: `  oncekv intents --db payments.db
  oncekv intents --db payments.db --state needs_attention`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch state {
			case "", "pending", "unknown", "succeeded", "failed", "needs_attention":
			default:
				return usagef("--state must be pending, unknown, succeeded, failed or needs_attention, not %q", state)
			}
			list, err := query(o, func(src inspect.Source) ([]inspect.Intent, error) {
				return src.Intents(cmd.Context(), state)
			})
			if err != nil {
				return err
			}
			return o.emit(list, func(w io.Writer) {
				fmt.Fprintln(w, "ID\tKIND\tSUBJECT\tSTATE\tATTEMPTS\tNEXT ATTEMPT\tLAST ERROR")
				for _, in := range list {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", in.ID, in.Kind, in.Subject, in.State, in.Attempts, tsp(in.NextAttemptAt), dash(in.LastError))
				}
				fmt.Fprintf(w, "(%d intents)\n", len(list))
			})
		},
	}
	c.Flags().StringVar(&state, "state", "", "only intents in `STATE`")
	addrFlag(c, o)
	return c
}
