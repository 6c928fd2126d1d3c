package command

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// etcdRevision is the cluster's current revision: it moves with every
// write.
func etcdRevision(t *testing.T, endpoints string) int64 {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoints}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer cli.Close()
	r, err := cli.Get(context.Background(), "probe")
	require.NoError(t, err)
	return r.Header.Revision
}

// --etcd works wherever --db does: the commands read (and sweep, migrate,
// operate on) the database a service keeps on etcd; read commands write
// nothing there; compact, bbolt's, is refused with a usage error.
func TestCommandsOnEtcd(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	eps := c.Endpoints()
	b, err := etcdkv.Open(eps, &etcdkv.Options{Prefix: "/svc/"})
	require.NoError(t, err)
	clock := kvtest.NewManualClock(time.Now().Add(-150 * time.Minute))
	db, err := kv.New(b, &kv.Options{Clock: clock})
	require.NoError(t, err)
	populate(t, db, clock)
	require.NoError(t, db.Close())
	on := func(args ...string) (string, string, int) {
		return run(append(args, "--etcd", eps, "--etcd-prefix", "/svc/")...)
	}

	rev := etcdRevision(t, eps)
	out, stderr, code := on("keys")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `acme\|POST /v1/orders\s+create-1\s+completed\s+1\s+201`, out)
	require.Contains(t, out, "(4 keys)")
	out, stderr, code = on("stats")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `TENANT\s+RECORDS\s+STORED BYTES\nacme\s+4\s+\d+\nglobex\s+1\s+\d+`, out)
	out, _, code = on("intents")
	require.Equal(t, 0, code)
	require.Contains(t, out, "(3 intents)")
	out, _, code = on("outbox")
	require.Equal(t, 0, code)
	require.Contains(t, out, "ev-pending")
	out, _, code = on("check")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "ok: no problems found")
	require.Equal(t, rev, etcdRevision(t, eps), "read commands wrote to etcd")

	_, stderr, code = on("sweep")
	require.Equal(t, 0, code, stderr)
	out, _, _ = on("keys", "--expired")
	require.NotContains(t, out, "old-1", "swept")
	_, stderr, code = on("migrate")
	require.Equal(t, 0, code, stderr)
	out, stderr, code = on("recount")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "ok: every tenant's usage matched its records", "the sweep kept the shards exact")
	_, stderr, code = on("drop", "0000000000000001")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "idempotency records are kept by key in this database, not in a log")

	_, stderr, code = on("compact", "--out", t.TempDir()+"/x.db")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "etcd compacts its own history")
	_, stderr, code = run("keys", "--etcd", eps, "--db", "x.db")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "use --db or --etcd, not both")
	// Another prefix holds no oncekv database: refused, not created.
	rev = etcdRevision(t, eps)
	_, stderr, code = run("keys", "--etcd", eps, "--etcd-prefix", "/nothing/")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "etcd "+eps+" prefix /nothing/")
	require.Equal(t, rev, etcdRevision(t, eps))
	// prefixes lists what the cluster holds: the service's database.
	out, stderr, code = run("prefixes", "--etcd", eps)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `PREFIX\s+RECORDED\n/svc/\s+\d{4}-\d\d-\d\dT`, out)
	require.Contains(t, out, "(1 prefixes)")
	out, _, code = run("prefixes", "--etcd", eps, "--json")
	require.Equal(t, 0, code)
	var listed []struct {
		Prefix     string    `json:"prefix"`
		RecordedAt time.Time `json:"recorded_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, "/svc/", listed[0].Prefix)
	require.False(t, listed[0].RecordedAt.IsZero())
	_, stderr, code = run("prefixes", "--db", "x.db")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--etcd")
	require.Equal(t, rev, etcdRevision(t, eps), "prefixes wrote to etcd")

	// A prefix that nests with the service's (a missing slash, a
	// subfolder) is refused by name, for reads and writes alike.
	for _, p := range []string{"/svc", "/svc/billing/"} {
		for _, cmd := range []string{"keys", "sweep"} {
			_, stderr, code = run(cmd, "--etcd", eps, "--etcd-prefix", p)
			require.Equal(t, 1, code, "%s --etcd-prefix %s", cmd, p)
			require.Contains(t, stderr, `prefix nests with another database's: "`+p+`" and "/svc/"`)
		}
	}
	require.Equal(t, rev, etcdRevision(t, eps))
}
