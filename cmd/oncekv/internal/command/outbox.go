package command

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
)

func newOutbox(o *options) *cobra.Command {
	c := &cobra.Command{
		Use:     "outbox",
		Short:   "Show the outbox: pending events, their age, quarantined events",
		Example: `  oncekv outbox --db payments.db`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ob, err := query(o, func(src inspect.Source) (inspect.Outbox, error) {
				return src.Outbox(cmd.Context())
			})
			if err != nil {
				return err
			}
			return o.emit(ob, func(w io.Writer) {
				fmt.Fprintf(w, "pending\t%d\n", ob.Pending)
				fmt.Fprintf(w, "oldest pending age\t%s\n", (time.Duration(ob.OldestAgeSeconds * float64(time.Second))).Round(time.Millisecond))
				fmt.Fprintf(w, "published (kept)\t%d\n", ob.Published)
				fmt.Fprintf(w, "quarantined\t%d\n", ob.Quarantined)
				if ob.Corrupt > 0 {
					fmt.Fprintf(w, "corrupt (unreadable)\t%d\n", ob.Corrupt)
					fmt.Fprintln(w, "\nCORRUPT SEQ\tSTATE\tID\tPROBLEM")
					for _, e := range ob.CorruptEvents {
						fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", e.Seq, e.State, dash(esc(e.ID)), esc(e.Error))
					}
				}
				if len(ob.QuarantinedEvents) > 0 {
					fmt.Fprintln(w, "\nQUARANTINED SEQ\tID\tTOPIC\tATTEMPTS\tLAST ERROR")
					for _, e := range ob.QuarantinedEvents {
						fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\n", e.Seq, esc(e.ID), esc(e.Topic), e.Attempts, dash(esc(e.LastError)))
					}
				}
				if len(ob.OldestPending) > 0 {
					fmt.Fprintln(w, "\nPENDING SEQ\tID\tTOPIC\tATTEMPTS\tCREATED")
					for _, e := range ob.OldestPending {
						fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\n", e.Seq, esc(e.ID), esc(e.Topic), e.Attempts, ts(e.CreatedAt))
					}
				}
			})
		},
	}
	addrFlag(c, o)
	return c
}
