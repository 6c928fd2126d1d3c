package command

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/etcdkv"
)

func newPrefixes(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "prefixes",
		Short: "List the databases an etcd cluster holds: the prefixes their backends recorded (--etcd)",
		Long: `prefixes lists the registry of prefixes on an etcd cluster: every
database prefix a backend recorded before its first write, and when. A
backend refuses a prefix that begins with a recorded one, or that a recorded
one begins with (etcdkv.ErrNestedPrefix): this is the list it checks.
etcdkv.Drop removes a retired database and its entry.`,
		Example: `  oncekv prefixes --etcd http://127.0.0.1:2379
  oncekv prefixes --etcd http://127.0.0.1:2379 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.db != "":
				return usagef("--db is one file; prefixes lists an etcd cluster's databases (--etcd)")
			case o.etcd == "":
				return usagef("--etcd ENDPOINTS is required")
			}
			b, err := etcdkv.Open(o.etcd, nil)
			if err != nil {
				return err
			}
			defer func() { _ = b.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			list, err := etcdkv.Prefixes(ctx, b.Client(), 0)
			if err != nil {
				return fmt.Errorf("etcd %s: %w", o.etcd, err)
			}
			return o.emit(list, func(w io.Writer) {
				fmt.Fprintln(w, "PREFIX\tRECORDED")
				for _, r := range list {
					fmt.Fprintf(w, "%s\t%s\n", esc(r.Prefix), ts(r.At))
				}
				fmt.Fprintf(w, "(%d prefixes)\n", len(list))
			})
		},
	}
}
