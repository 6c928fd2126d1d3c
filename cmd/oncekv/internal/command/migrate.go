package command

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

func newMigrate(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Upgrade a database file to the current format",
		Long: `migrate upgrades a database written by an older oncekv to the current
format, for a stopped service's file. A file of format 1 keeps idempotency
records and inbox marks under their keys; format 2 keeps them in an
expiry-ordered log with an in-memory directory, and format 3 the log's
newest entries in a one-page tail beside it. migrate moves format-1 records
in transactions of 1,000 and raises the format record before the first one
moves (a format-2 file needs only the new format record), so an older
oncekv refuses the file instead of missing records.
It is resumable: a migration cut short goes on at the next migrate, or when
a service opens the file. A service does the same by itself when it starts;
migrate exists for files that tools open read-only (they refuse a format-1
file with records until it is migrated).`,
		Example: `  oncekv migrate --db payments.db`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := o.open(true)
			if err != nil {
				return err
			}
			defer func() { _ = db.Close() }()
			before, err := storedFormat(cmd.Context(), db)
			if err != nil {
				return err
			}
			start := time.Now()
			l, err := ledger.New(db, nil)
			if err != nil {
				return err
			}
			if _, err := inbox.New(db, nil); err != nil {
				return err
			}
			after, err := storedFormat(cmd.Context(), db)
			if err != nil {
				return err
			}
			st := l.Stats()
			res := struct {
				File    string  `json:"file"`
				From    uint32  `json:"from_format"`
				To      uint32  `json:"to_format"`
				Records int     `json:"idempotency_records"`
				Seconds float64 `json:"seconds"`
			}{o.where(), before, after, st.Records, time.Since(start).Seconds()}
			return o.emit(res, func(w io.Writer) {
				if before == after {
					fmt.Fprintf(w, "%s is already at format %d (%d idempotency records)\n", o.where(), after, st.Records)
					return
				}
				fmt.Fprintf(w, "%s migrated from format %d to %d: %d idempotency records in the log (%.2fs)\n", o.where(), before, after, st.Records, res.Seconds)
			})
		},
	}
}

func storedFormat(ctx context.Context, db *kv.DB) (uint32, error) {
	var v uint32
	err := db.View(ctx, func(tx kv.Tx) error {
		var err error
		v, err = keyspace.StoredFormat(tx)
		return err
	})
	return v, err
}
