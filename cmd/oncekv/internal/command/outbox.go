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
					if more := ob.Quarantined - len(ob.QuarantinedEvents); more > 0 {
						fmt.Fprintf(w, "... and %d more (the console's Requeue all, or outbox.RequeueAll, moves every one)\n", more)
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
	c.AddCommand(newOutboxRequeue(o))
	return c
}

func newOutboxRequeue(o *options) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "requeue ID | --all",
		Short: "Move a quarantined event (or every one) back to the queue, with a fresh attempt budget",
		Long: `outbox requeue moves a quarantined event back to the pending queue with a
fresh attempt budget; --all moves every quarantined event that can be read
(a damaged one stays, for oncekv drop). On bbolt an event goes back to its
place in sequence order; on etcd to the back of the queue.

It works on a stopped service's file (--db; the relay publishes the events
when the service runs again) or through a running service's admin endpoint
(--addr with --token), whose relay is woken at once.`,
		Example: `  oncekv outbox requeue --db payments.db order.paid/ord_42
  oncekv outbox requeue --addr http://127.0.0.1:8081 --token "$TOKEN" --all`,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return usagef("give an event ID or --all, not both")
			case !all && len(args) != 1:
				return usagef("outbox requeue takes one event ID, or --all (see oncekv outbox requeue --help)")
			}
			rq, err := operate(o, func(op inspect.Operator) (inspect.Requeued, error) {
				if all {
					return op.RequeueAllEvents(cmd.Context())
				}
				return op.RequeueEvent(cmd.Context(), args[0])
			})
			if err != nil {
				return err
			}
			return o.emit(rq, func(w io.Writer) {
				fmt.Fprintf(w, "requeued\t%d\n", rq.Events)
			})
		},
	}
	c.Flags().BoolVar(&all, "all", false, "requeue every quarantined event")
	addrFlag(c, o)
	return c
}
