package inspect_test

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// A usage counter that does not decode stops its tenant's writes in the
// running service; the admin endpoint's recount (token only) mends it
// without a restart, and the check is clean after it.
func TestRecountUsageThroughTheEndpoint(t *testing.T) {
	db, x, _ := fixture(t)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, Executor: x})))
	defer srv.Close()
	anon := &inspect.Client{BaseURL: srv.URL}
	admin := &inspect.Client{BaseURL: srv.URL, Token: token}
	do := func(key string) error {
		_, err := l.Do(ctx, ledger.Request{Scope: "acme|POST /x", Key: key, Fingerprint: ledger.Fingerprint{1}}, func(kv.Tx) (ledger.Response, error) {
			return ledger.Response{Status: 201}, nil
		})
		return err
	}
	want, err := l.Usage(ctx, "acme")
	require.NoError(t, err)

	require.NoError(t, db.Bolt().Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("\x00oncekv/ledger.usage")).Put([]byte("acme"), []byte{0xff, 0})
	}))
	require.ErrorContains(t, do("k2"), `usage of tenant "acme"`)
	problems, err := admin.Check(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, problems)

	_, err = anon.RecountUsage(ctx)
	require.ErrorContains(t, err, "401")
	mended, err := admin.RecountUsage(ctx)
	require.NoError(t, err)
	require.Equal(t, []inspect.UsageRecount{{Tenant: "acme", Damaged: 1, Records: want.Records, Bytes: want.Bytes}}, mended)
	problems, err = admin.Check(ctx)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, do("k2"), "the tenant writes again")
	mended, err = admin.RecountUsage(ctx)
	require.NoError(t, err)
	require.Empty(t, mended)
}
