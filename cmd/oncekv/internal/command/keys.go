package command

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
)

func newKeys(o *options) *cobra.Command {
	var q inspect.KeysQuery
	c := &cobra.Command{
		Use:   "keys",
		Short: "List idempotency keys",
		Example: `  oncekv keys --db payments.db
  oncekv keys --db payments.db --scope 'acme|POST /v1/orders' --status completed --limit 20
  oncekv keys --db payments.db --expired --json
  oncekv keys --addr http://127.0.0.1:8081`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if q.Status != "" && q.Status != "in_progress" && q.Status != "completed" {
				return usagef("--status must be in_progress or completed, not %q", q.Status)
			}
			if q.Limit < 0 {
				return usagef("--limit must be 0 (all) or more, not %d", q.Limit)
			}
			keys, err := query(o, func(src inspect.Source) ([]inspect.Key, error) {
				return src.Keys(cmd.Context(), q)
			})
			if err != nil {
				return err
			}
			return o.emit(keys, func(w io.Writer) {
				fmt.Fprintln(w, "SCOPE\tKEY\tSTATUS\tVERSION\tRESPONSE\tCREATED\tEXPIRES\tBYTES\tPROBLEM")
				for _, k := range keys {
					if k.Error != "" {
						problem := esc(k.Error)
						if k.Entry != "" {
							problem += " (log entry " + k.Entry + ": oncekv drop " + k.Entry + ")"
						}
						fmt.Fprintf(w, "%s\t%s\tcorrupt\t-\t-\t-\t-\t-\t%s\n", dash(esc(k.Scope)), dash(esc(k.Key)), problem)
						continue
					}
					resp := "-"
					if k.ResponseStatus != 0 {
						resp = fmt.Sprint(k.ResponseStatus)
					}
					status := k.Status
					if k.Expired {
						status += " (expired)"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d%s\t-\n", esc(k.Scope), esc(k.Key), status, k.Version, resp, ts(k.CreatedAt), ts(k.ExpiresAt), k.StoredBytes, encryptedNote(k.Encrypted))
				}
				fmt.Fprintf(w, "(%d keys)\n", len(keys))
			})
		},
	}
	c.Flags().StringVar(&q.ScopePrefix, "scope", "", "only scopes starting with `PREFIX` (tenant|METHOD /route)")
	c.Flags().StringVar(&q.Status, "status", "", "only in_progress or completed")
	c.Flags().BoolVar(&q.Expired, "expired", false, "only records past their retention, not yet swept")
	c.Flags().IntVar(&q.Limit, "limit", 0, "at most `N` records (0: all)")
	addrFlag(c, o)
	return c
}
