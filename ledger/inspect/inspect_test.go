package inspect_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/ledger/inspect"
)

// The admin handler answers the same queries as the file, read-only, with
// bodies redacted unless enabled.
func TestHandlerMatchesFileAndRedacts(t *testing.T) {
	ctx := context.Background()
	db, err := kv.Open(filepath.Join(t.TempDir(), "i.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	l, _ := ledger.New(db, nil)
	_, err = l.Do(ctx, ledger.Request{Scope: "acme|POST /x", Key: "k1", Fingerprint: ledger.Fingerprint{1}}, func(kv.Tx) (ledger.Response, error) {
		return ledger.Response{Status: 201, Body: []byte("secret body")}, nil
	})
	require.NoError(t, err)

	file := inspect.New(db)
	for _, show := range []bool{false, true} {
		srv := httptest.NewServer(inspect.Handler(db, inspect.HandlerOptions{ShowBodies: show}))
		remote := &inspect.Client{BaseURL: srv.URL}
		want, err := file.Keys(ctx, inspect.KeysQuery{})
		require.NoError(t, err)
		got, err := remote.Keys(ctx, inspect.KeysQuery{})
		require.NoError(t, err)
		require.Equal(t, len(want), len(got))
		require.Equal(t, want[0].Key, got[0].Key)
		require.Equal(t, want[0].ResponseStatus, got[0].ResponseStatus)

		rec, err := remote.Get(ctx, "acme|POST /x", "k1", true)
		require.NoError(t, err)
		if show {
			require.Equal(t, "secret body", rec.Body)
		} else {
			require.Empty(t, rec.Body)
			require.Equal(t, "redacted", rec.BodyEncoding)
		}
		_, err = remote.Get(ctx, "acme|POST /x", "missing", false)
		require.True(t, errors.Is(err, inspect.ErrNotFound), "%v", err)
		st, err := remote.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, st.Counts["idempotency.completed"])
		problems, err := remote.Check(ctx)
		require.NoError(t, err)
		require.Empty(t, problems)
		srv.Close()
	}
}
