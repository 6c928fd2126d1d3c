package command

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
)

func newStats(o *options) *cobra.Command {
	c := &cobra.Command{
		Use:     "stats",
		Short:   "Count records per kind and state; usage per tenant (what quotas bound); sizes and bbolt page statistics",
		Example: `  oncekv stats --db payments.db`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := query(o, func(src inspect.Source) (inspect.Stats, error) {
				return src.Stats(cmd.Context())
			})
			if err != nil {
				return err
			}
			return o.emit(st, func(w io.Writer) {
				if st.PageSize == 0 { // not a bbolt file: no pages to report
					fmt.Fprintf(w, "store\t%s on %s (format %d)\n", dash(st.Path), dash(st.Backend), st.FormatVersion)
				} else {
					fmt.Fprintf(w, "file\t%s (%d bytes, page size %d, format %d)\n", dash(st.Path), st.FileBytes, st.PageSize, st.FormatVersion)
					fmt.Fprintf(w, "free pages\t%d (%d bytes; %d pending release)\n", st.FreePages, st.FreeBytes, st.PendingPages)
				}
				fmt.Fprintf(w, "writer\t%s\n", writerLine(st))
				if len(st.BackendCounts) > 0 { // etcd's, in the service's process (--addr)
					fmt.Fprintf(w, "\nBACKEND COUNT (%s)\tVALUE\n", dash(st.Backend))
					for _, c := range st.BackendCounts {
						fmt.Fprintf(w, "%s\t%d\n", c.Name, c.Value)
					}
				}
				names := make([]string, 0, len(st.Counts))
				for n := range st.Counts {
					names = append(names, n)
				}
				sort.Strings(names)
				fmt.Fprintln(w, "\nRECORDS\tCOUNT")
				for _, n := range names {
					fmt.Fprintf(w, "%s\t%d\n", n, st.Counts[n])
				}
				fmt.Fprintln(w, "\nTENANT\tRECORDS\tSTORED BYTES")
				for _, u := range st.Tenants {
					fmt.Fprintf(w, "%s\t%d\t%d\n", esc(u.Tenant), u.Records, u.Bytes)
				}
				fmt.Fprintln(w, "\nBUCKET\tKEYS\tDEPTH\tLEAF PAGES\tBRANCH PAGES\tLEAF BYTES IN USE")
				for _, b := range st.Buckets {
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\n", b.Name, b.Keys, b.Depth, b.LeafPages, b.BranchPage, b.LeafInuse)
				}
			})
		},
	}
	addrFlag(c, o)
	return c
}

// writerLine says what the database's writer is doing (inspect.Stats).
func writerLine(st inspect.Stats) string {
	if st.WriterHeldSeconds > 0 {
		return fmt.Sprintf("held for %s by the running write transaction; %d writes queued",
			time.Duration(st.WriterHeldSeconds*float64(time.Second)).Round(time.Millisecond), st.WriterQueued)
	}
	return fmt.Sprintf("idle; %d writes queued", st.WriterQueued)
}
