package command

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
)

func newDrop(o *options) *cobra.Command {
	var kind string
	c := &cobra.Command{
		Use:   "drop ENTRY",
		Short: "Remove a damaged record that check names (its key then runs again)",
		Long: `drop removes one damaged record, named as "oncekv check" names it:
"idempotency log entry ENTRY: damaged (checksum or framing)" (or a record
that does not decode), the same for "inbox", or an outbox "event seq N"
(--kind outbox N). A damaged record that still names its key answers
every request with that key with an error, and an inbox mark its message,
because whether its work ran cannot be read; the retention sweep leaves it
in place. Dropping it lets the key (or message) run again: check the
business state first. A damaged outbox event can never be published (the
relay passes over it; the lag counts it until it is dropped). A record
that decodes is refused.

It works on a stopped service's file (--db), or through a running
service's admin endpoint (--addr with --token). Idempotency records and
inbox marks need the log layout (bbolt): a database on etcd keeps them by
key.`,
		Example: `  oncekv check --db payments.db
  oncekv drop --db payments.db 1ac51aa700000001
  oncekv drop --addr http://127.0.0.1:8081 --token "$TOKEN" --kind inbox 1ac51ad200000003
  oncekv drop --db payments.db --kind outbox 42`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := inspect.ParseEntry(kind, args[0]); err != nil {
				return usagef("%v", err)
			}
			d, err := operate(o, func(op inspect.Operator) (inspect.Dropped, error) {
				return op.DropDamaged(cmd.Context(), kind, args[0])
			})
			if err != nil {
				return err
			}
			return o.emit(d, func(w io.Writer) {
				switch d.Kind {
				case "outbox":
					fmt.Fprintf(w, "dropped\toutbox event seq %s\n", d.Entry)
					fmt.Fprintf(w, "id\t%s\n", dash(esc(d.Key)))
				default:
					fmt.Fprintf(w, "dropped\t%s log entry %s\n", d.Kind, d.Entry)
					if d.Scope == "" && d.Key == "" {
						fmt.Fprintln(w, "scope, key\tunreadable")
					} else {
						fmt.Fprintf(w, "scope\t%s\nkey\t%s\n", esc(d.Scope), esc(d.Key))
					}
				}
				fmt.Fprintf(w, "reason\t%s\n", esc(d.Reason))
			})
		},
	}
	c.Flags().StringVar(&kind, "kind", "idempotency", "the record's kind, as check names it: idempotency, inbox or outbox")
	addrFlag(c, o)
	return c
}
