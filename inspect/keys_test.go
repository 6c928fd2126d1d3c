package inspect_test

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
)

// Keys pages and filters as the console and `oncekv keys` rely on: a
// limit alone, a key prefix with a limit, an offset with a limit (the
// console's pages), a prefix with an offset, a status, a scope prefix.
// Each answer is checked against the full listing filtered by hand, so the
// store's order (expiry on bbolt) does not matter. Only a record in
// progress shows a lease. The admin API's client (oncekv keys --addr, a
// console on another host) answers the same.
func TestKeysQuery(t *testing.T) {
	t.Parallel()
	db, l := openLedger(t, nil)
	for i := range 12 {
		tenant := []string{"acme", "globex"}[i%2]
		key := fmt.Sprintf("%s-%02d", []string{"a", "b", "c"}[i%3], i)
		_, err := l.Do(ctx, ledger.Request{Scope: tenant + "|POST /x", Key: key, Fingerprint: ledger.Fingerprint{byte(i)}},
			func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
		require.NoError(t, err)
	}
	_, err := l.Claim(ctx, ledger.Request{Scope: "acme|POST /x", Key: "a-claimed", Fingerprint: ledger.Fingerprint{99}})
	require.NoError(t, err)
	for name, src := range sources(t, db) {
		t.Run(name, func(t *testing.T) { keysQueries(t, src) })
	}
}

// openLedger opens a fresh file (NoSync, clock if not nil) and its ledger.
func openLedger(t *testing.T, clock kv.Clock) (*kv.DB, *ledger.Ledger) {
	t.Helper()
	db, err := kv.Open(filepath.Join(t.TempDir(), "i.db"), &kv.Options{NoSync: true, Clock: clock})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	return db, l
}

// sources returns db's Inspector and a client of db's admin API, which
// must answer alike.
func sources(t *testing.T, db *kv.DB) map[string]inspect.Source {
	t.Helper()
	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token})))
	t.Cleanup(srv.Close)
	return map[string]inspect.Source{"file": must(inspect.New(db)), "admin API": &inspect.Client{BaseURL: srv.URL}}
}

func keysQueries(t *testing.T, in inspect.Source) {
	keys := func(q inspect.KeysQuery) []string {
		t.Helper()
		rows, err := in.Keys(ctx, q)
		require.NoError(t, err)
		out := []string{}
		for _, r := range rows {
			out = append(out, r.Scope+"\t"+r.Key)
		}
		return out
	}
	all := keys(inspect.KeysQuery{})
	require.Len(t, all, 13)
	where := func(keep func(string) bool) []string {
		out := []string{}
		for _, k := range all {
			if keep(k) {
				out = append(out, k)
			}
		}
		return out
	}
	keyOf := func(k string) string { return k[strings.IndexByte(k, '\t')+1:] }
	prefixA := where(func(k string) bool { return strings.HasPrefix(keyOf(k), "a-") })
	prefixB := where(func(k string) bool { return strings.HasPrefix(keyOf(k), "b-") })

	require.Equal(t, all[:5], keys(inspect.KeysQuery{Limit: 5}))
	require.Equal(t, prefixA[:3], keys(inspect.KeysQuery{KeyPrefix: "a-", Limit: 3}))
	require.Equal(t, all[2:5], keys(inspect.KeysQuery{Offset: 2, Limit: 3}))
	require.Equal(t, all[11:], keys(inspect.KeysQuery{Offset: 11, Limit: 3}), "the last page is short")
	require.Empty(t, keys(inspect.KeysQuery{Offset: 13}))
	require.Equal(t, prefixB[1:], keys(inspect.KeysQuery{KeyPrefix: "b-", Offset: 1, Limit: 10}))
	require.Equal(t, where(func(k string) bool { return strings.HasPrefix(k, "globex|") }), keys(inspect.KeysQuery{ScopePrefix: "globex|"}))

	rows, err := in.Keys(ctx, inspect.KeysQuery{Status: "in_progress"})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "a-claimed", rows[0].Key)
	require.NotNil(t, rows[0].LeaseExpiresAt, "a claim shows its lease")
	rows, err = in.Keys(ctx, inspect.KeysQuery{Status: "completed"})
	require.NoError(t, err)
	require.Len(t, rows, 12)
	for _, r := range rows {
		require.Nil(t, r.LeaseExpiresAt, "a completed record has no lease to show")
		require.Equal(t, 201, r.ResponseStatus)
	}
	_, err = in.Keys(ctx, inspect.KeysQuery{Status: "done"})
	require.Error(t, err)
}

// An intent shows when its next attempt is due only while one is to come
// (pending, or unknown): a parked or finished intent has none to show,
// and a finished one shows when it finished.
func TestIntentViewShowsTheNextAttemptOnlyWhenOneIsDue(t *testing.T) {
	t.Parallel()
	db, x, parked := fixture(t)
	pending, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: "order/2", Key: "2", Purpose: "charge"})
	require.NoError(t, err)
	done, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: "order/3", Key: "3", Purpose: "charge"})
	require.NoError(t, err)
	_, err = x.Execute(ctx, done.ID)
	require.NoError(t, err)

	views, err := must(inspect.New(db)).Intents(ctx, "", 0)
	require.NoError(t, err)
	byID := map[string]inspect.Intent{}
	for _, v := range views {
		byID[v.ID] = v
	}
	require.Len(t, byID, 3)
	require.Equal(t, "pending", byID[pending.ID].State)
	require.NotNil(t, byID[pending.ID].NextAttemptAt)
	require.Nil(t, byID[pending.ID].FinishedAt)
	require.Equal(t, "needs_attention", byID[parked].State)
	require.Nil(t, byID[parked].NextAttemptAt)
	require.Equal(t, "succeeded", byID[done.ID].State)
	require.Nil(t, byID[done.ID].NextAttemptAt)
	require.NotNil(t, byID[done.ID].FinishedAt)
}
