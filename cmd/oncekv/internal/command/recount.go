package command

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
)

func newRecount(o *options) *cobra.Command {
	c := &cobra.Command{
		Use:   "recount",
		Short: "Count every tenant's usage again from its records and mend what disagrees",
		Long: `recount counts every tenant's usage (records and stored bytes, what quotas
bound) again from the idempotency records themselves, and mends what
disagrees with them. "oncekv check" reports the same.

On a bbolt file usage is counted in memory, from the records, by the
process that opens the ledger: recount mends a running service's counts
(through --addr), and on a stopped service's file (--db) it only removes
the counters an older version kept in the file. It is one transaction,
which holds the writer while it reads every record (0.29 s for a million
records on a 2-core machine).

On etcd usage is kept in counters: a counter that does not decode is
removed (until then every write of its tenant fails), one that drifted is
corrected, one kept for a tenant without records goes. Each transaction
mends as many tenants as etcd's operation limit allows.

It works on a stopped service's database (--db), or through a running
service's admin endpoint (--addr with --token), without a restart.`,
		Example: `  oncekv recount --db payments.db
  oncekv recount --addr http://127.0.0.1:8081 --token "$TOKEN"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mended, err := operate(o, func(op inspect.Operator) ([]inspect.UsageRecount, error) {
				return op.RecountUsage(cmd.Context())
			})
			if err != nil {
				return err
			}
			return o.emit(mended, func(w io.Writer) {
				if len(mended) == 0 {
					fmt.Fprintln(w, "ok: every tenant's usage matched its records")
					return
				}
				fmt.Fprintln(w, "TENANT\tWAS RECORDS\tWAS BYTES\tDAMAGED COUNTERS\tRECORDS\tBYTES")
				for _, m := range mended {
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\n", esc(m.Tenant), m.WasRecords, m.WasBytes, m.Damaged, m.Records, m.Bytes)
				}
				fmt.Fprintf(w, "(%d tenants mended)\n", len(mended))
			})
		},
	}
	addrFlag(c, o)
	return c
}
