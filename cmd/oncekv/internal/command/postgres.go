package command

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncekv/oncekv/bench"
)

// postgresWorkload is the pattern a user would pick instead of oncekv: the
// idempotency key in a PostgreSQL table, claimed with an insert, the
// business row inserted, the claim completed with the stored response, all
// in one transaction with synchronous commit (the server's default). It
// creates its tables and empties them.
func postgresWorkload(ctx context.Context, dsn string, clients int) (bench.Workload, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return bench.Workload{}, usagef("--against-postgres: %v", err)
	}
	cfg.MaxConns = int32(max(clients, 1)) //nolint:gosec // a client count
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return bench.Workload{}, fmt.Errorf("postgres: %w", err)
	}
	_, err = pool.Exec(ctx, `
CREATE TABLE IF NOT EXISTS oncekv_bench_idem (
	scope text NOT NULL, key text NOT NULL, fingerprint bytea NOT NULL,
	status text NOT NULL, response bytea,
	created_at timestamptz NOT NULL DEFAULT now(), completed_at timestamptz,
	PRIMARY KEY (scope, key));
CREATE TABLE IF NOT EXISTS oncekv_bench_orders (id bytea PRIMARY KEY, payload bytea NOT NULL);
TRUNCATE oncekv_bench_idem, oncekv_bench_orders`)
	if err != nil {
		pool.Close()
		return bench.Workload{}, fmt.Errorf("postgres: create tables: %w", err)
	}
	const scope = "bench|POST /v1/orders"
	fingerprint := make([]byte, 32)
	return bench.Workload{
		Name: "postgres",
		Preload: func(ctx context.Context, n int, payload []byte) error {
			orders := make([][]any, n)
			idem := make([][]any, n)
			for i := range n {
				k := []byte(fmt.Sprintf("p%016x", uint64(i)*0x9E3779B97F4A7C15))
				orders[i] = []any{k, payload}
				idem[i] = []any{scope, fmt.Sprintf("%x", k), fingerprint, "completed", payload}
			}
			if _, err := pool.CopyFrom(ctx, pgx.Identifier{"oncekv_bench_orders"}, []string{"id", "payload"}, pgx.CopyFromRows(orders)); err != nil {
				return err
			}
			_, err := pool.CopyFrom(ctx, pgx.Identifier{"oncekv_bench_idem"}, []string{"scope", "key", "fingerprint", "status", "response"}, pgx.CopyFromRows(idem))
			return err
		},
		Op: func(ctx context.Context, k, payload, response []byte) error {
			key := fmt.Sprintf("%x", k)
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, `INSERT INTO oncekv_bench_idem (scope, key, fingerprint, status) VALUES ($1, $2, $3, 'in_progress') ON CONFLICT DO NOTHING`, scope, key, fingerprint)
				if err != nil {
					return err
				}
				if tag.RowsAffected() != 1 {
					return fmt.Errorf("postgres: key %s already claimed", key)
				}
				if _, err := tx.Exec(ctx, `INSERT INTO oncekv_bench_orders (id, payload) VALUES ($1, $2)`, k, payload); err != nil {
					return err
				}
				_, err = tx.Exec(ctx, `UPDATE oncekv_bench_idem SET status = 'completed', response = $3, completed_at = now() WHERE scope = $1 AND key = $2`, scope, key, response)
				return err
			})
		},
		Close: func() error { pool.Close(); return nil },
	}, nil
}
