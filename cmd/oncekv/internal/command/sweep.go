package command

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/retention"

	// The sweepers of every record kind.
	_ "github.com/oncekv/oncekv/ledger"
	_ "github.com/oncekv/oncekv/sideeffect"
)

func newSweep(o *options) *cobra.Command {
	var cfg retention.Config
	c := &cobra.Command{
		Use:   "sweep",
		Short: "Remove records past their retention, once",
		Long: `sweep runs the retention sweeper once: it removes expired idempotency
records, inbox IDs, published outbox events and finished intents, in short
batches, re-checking each record (never a live claim, a pending intent or an
unpublished event). It needs the file for writing: stop the service, or let
the service run its own sweeps (retention.Run). --dry-run only counts.`,
		Example: `  oncekv sweep --db payments.db --dry-run
  oncekv sweep --db payments.db --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.BatchSize < 0 {
				return usagef("--batch must be positive (or 0 for the default), not %d", cfg.BatchSize)
			}
			db, err := o.open(!cfg.DryRun)
			if err != nil {
				return err
			}
			defer func() { _ = db.Close() }()
			st, err := retention.Sweep(cmd.Context(), db, &cfg, inspect.RecordKinds()...)
			if err != nil {
				return err
			}
			type kindJSON struct {
				Kind        string         `json:"kind"`
				Examined    int            `json:"examined"`
				Deleted     int            `json:"deleted"`
				Skipped     map[string]int `json:"skipped"`
				Batches     int            `json:"batches"`
				LongestTxMS float64        `json:"longest_tx_ms"`
			}
			out := struct {
				DryRun     bool       `json:"dry_run"`
				DurationMS float64    `json:"duration_ms"`
				Kinds      []kindJSON `json:"kinds"`
			}{DryRun: st.DryRun, DurationMS: float64(st.Duration.Microseconds()) / 1000}
			for k, ks := range st.Kinds {
				out.Kinds = append(out.Kinds, kindJSON{string(k), ks.Examined, ks.Deleted, ks.Skipped, ks.Batches, float64(ks.LongestTx.Microseconds()) / 1000})
			}
			sort.Slice(out.Kinds, func(i, j int) bool { return out.Kinds[i].Kind < out.Kinds[j].Kind })
			return o.emit(out, func(w io.Writer) {
				verb := "DELETED"
				if st.DryRun {
					verb = "WOULD DELETE"
				}
				fmt.Fprintf(w, "KIND\tEXAMINED\t%s\tSKIPPED\tBATCHES\tLONGEST TX\n", verb)
				for _, k := range out.Kinds {
					fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%.1fms\n", k.Kind, k.Examined, k.Deleted, skipped(k.Skipped), k.Batches, k.LongestTxMS)
				}
				fmt.Fprintf(w, "(%.1fms)\n", out.DurationMS)
			})
		},
	}
	c.Flags().BoolVar(&cfg.DryRun, "dry-run", false, "count what would be removed, remove nothing")
	c.Flags().IntVar(&cfg.BatchSize, "batch", 0, "records per write transaction (default 1000)")
	return c
}

func skipped(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	reasons := make([]string, 0, len(m))
	for r := range m {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%s=%d", r, m[r])
	}
	return strings.Join(parts, ",")
}
