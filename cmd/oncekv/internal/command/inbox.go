package command

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
)

func newInbox(o *options) *cobra.Command {
	var consumer string
	var limit int
	c := &cobra.Command{
		Use:     "inbox",
		Short:   "List processed message IDs",
		Example: `  oncekv inbox --db consumer.db --consumer billing --limit 50`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return usagef("--limit must be 0 (all) or more, not %d", limit)
			}
			list, err := query(o, func(src inspect.Source) ([]inspect.InboxEntry, error) {
				return src.Inbox(cmd.Context(), consumer, limit)
			})
			if err != nil {
				return err
			}
			return o.emit(list, func(w io.Writer) {
				fmt.Fprintln(w, "CONSUMER\tMESSAGE ID\tPROCESSED\tEXPIRES\tPROBLEM")
				for _, e := range list {
					if e.Error != "" {
						fmt.Fprintf(w, "%s\t%s\tcorrupt\t-\t%s\n", dash(esc(e.Consumer)), dash(esc(e.MessageID)), esc(e.Error))
						continue
					}
					exp := ts(e.ExpiresAt)
					if e.Expired {
						exp += " (expired)"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t-\n", esc(e.Consumer), esc(e.MessageID), ts(e.ProcessedAt), exp)
				}
				fmt.Fprintf(w, "(%d message IDs)\n", len(list))
			})
		},
	}
	c.Flags().StringVar(&consumer, "consumer", "", "only `CONSUMER`'s IDs")
	c.Flags().IntVar(&limit, "limit", 0, "at most `N` (0: all)")
	addrFlag(c, o)
	return c
}
