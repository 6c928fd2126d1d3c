package command

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/atomicfile"
)

func newCompact(o *options) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "compact",
		Short: "Write a compacted copy of the database",
		Long: `compact copies every bucket into a new file with bbolt's compaction, so
the copy holds no free pages: the way to give back space after large sweeps
(bbolt never shrinks a file in place). The source is opened read-only;
--out must not exist and holds the whole copy or nothing, a crash included.
Put it in place while the service is stopped (oncekv restore --from does).`,
		Example: `  oncekv compact --db payments.db --out payments.compact.db`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.etcd != "" {
				return usagef("compact works on a bbolt file; etcd compacts its own history (auto-compaction, or etcdctl compact and defrag)")
			}
			if out == "" {
				return usagef("--out FILE is required")
			}
			if _, err := os.Stat(out); err == nil {
				return fmt.Errorf("%s exists; compact writes a new file", out)
			}
			src, err := o.open(false)
			if err != nil {
				return err
			}
			defer func() { _ = src.Close() }()
			before, _ := os.Stat(o.db)
			// Written beside --out and linked there once whole
			// (atomicfile.Create): bbolt's Compact commits as it goes, so a
			// copy cut short (killed, a full disk) would be a valid file
			// missing records; an existing --out, a symlink included, is
			// never replaced.
			o.removeLeftovers(out)
			if _, err := atomicfile.Create(out, func(f *os.File) (int64, error) {
				dst, err := bolt.Open(f.Name(), 0o600, nil)
				if err != nil {
					return 0, fmt.Errorf("compact: create %s: %w", out, err)
				}
				if err := bolt.Compact(dst, src.Bolt(), 64<<20); err != nil {
					_ = dst.Close()
					return 0, err
				}
				return 0, dst.Close()
			}); err != nil {
				return err
			}
			after, err := os.Stat(out)
			if err != nil {
				return err
			}
			res := struct {
				Source      string  `json:"source"`
				Out         string  `json:"out"`
				BytesBefore int64   `json:"bytes_before"`
				BytesAfter  int64   `json:"bytes_after"`
				Ratio       float64 `json:"ratio"`
			}{o.db, out, before.Size(), after.Size(), float64(after.Size()) / float64(before.Size())}
			return o.emit(res, func(w io.Writer) {
				fmt.Fprintf(w, "%s\t%d bytes\n%s\t%d bytes (%.0f%%)\n", res.Source, res.BytesBefore, res.Out, res.BytesAfter, 100*res.Ratio)
			})
		},
	}
	c.Flags().StringVar(&out, "out", "", "the compacted copy (`FILE`, must not exist)")
	return c
}
