//go:build unix

package command

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// startPostgres runs a throwaway PostgreSQL server from the distribution's
// binaries on a loopback port and returns its DSN. It skips the test when
// PostgreSQL is not installed. As root (initdb refuses it) the server runs
// as nobody.
func startPostgres(t *testing.T) string {
	t.Helper()
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		if len(matches) == 0 {
			t.Skip("PostgreSQL is not installed (apt-get install postgresql): skipping the comparison")
		}
		initdb = matches[len(matches)-1]
	}
	postgres := filepath.Join(filepath.Dir(initdb), "postgres")
	if _, err := os.Stat(postgres); err != nil {
		if postgres, err = exec.LookPath("postgres"); err != nil {
			t.Skip("PostgreSQL's server binary is not installed: skipping the comparison")
		}
	}
	dir, err := os.MkdirTemp("", "oncekv-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		require.NoError(t, err)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)} //nolint:gosec // ids from the system
		require.NoError(t, os.Chmod(dir, 0o777))
	}
	as := func(cmd *exec.Cmd) *exec.Cmd {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = dir
		return cmd
	}
	data := filepath.Join(dir, "data")
	out, err := as(exec.Command(initdb, "-D", data, "-U", "bench", "--auth=trust", "--no-sync")).CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	srv := as(exec.Command(postgres, "-D", data, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1", "-k", dir))
	require.NoError(t, srv.Start())
	t.Cleanup(func() { _ = srv.Process.Signal(syscall.SIGINT); _ = srv.Wait() })
	dsn := fmt.Sprintf("postgres://bench@127.0.0.1:%d/postgres?sslmode=disable", port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			_ = conn.Close(ctx)
			return dsn
		}
		if ctx.Err() != nil {
			t.Fatalf("PostgreSQL did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the server has no readiness signal but accepting connections
	}
}

// oncekv bench --against-postgres runs the classic pattern on a real server
// in the same run as bare and oncekv. Not in the default CI path (it starts
// a server): ONCEKV_TEST_POSTGRES=1, or make bench-postgres.
func TestBenchAgainstPostgres(t *testing.T) {
	if os.Getenv("ONCEKV_TEST_POSTGRES") == "" {
		t.Skip("set ONCEKV_TEST_POSTGRES=1 to start a PostgreSQL server and compare (make bench-postgres)")
	}
	dsn := startPostgres(t)
	out, stderr, code := run("bench", "--against-postgres", dsn, "--clients-list", "1,4", "--duration", "600ms", "--preload", "2000", "--json")
	require.Equal(t, 0, code, stderr)
	var res benchOutput
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Len(t, res.Runs, 2)
	for _, r := range res.Runs {
		require.Len(t, r.Results, 3)
		pg := r.Results[2]
		require.Equal(t, "postgres", pg.Name)
		require.Positive(t, pg.Ops)
		require.Positive(t, pg.RatioToBare)
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var rows, claims int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM oncekv_bench_orders`).Scan(&rows))
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM oncekv_bench_idem WHERE status = 'completed'`).Scan(&claims))
	require.Equal(t, rows, claims, "every business row has its completed key")
	require.Greater(t, rows, 2000, "preloaded rows plus the measured ones")
}
