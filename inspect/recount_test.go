package inspect_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// drift makes the running service's count of acme's usage disagree with
// its records, as a defect would (on bbolt usage is counted in memory).
func drift(t *testing.T, db *kv.DB) {
	t.Helper()
	kvtest.RequireBolt(t, db)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		return recstore.TallyOf(tx, recstore.Spec{Name: "ledger"}).Add(tx, "acme", 5, 100)
	}))
}

// A tenant's usage that disagrees with its records in the running service
// is reported by the check; the admin endpoint's recount (token only)
// mends it without a restart, and the check is clean after it.
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

	drift(t, db)
	problems, err := admin.Check(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, problems)

	_, err = anon.RecountUsage(ctx)
	require.ErrorContains(t, err, "401")
	mended, err := admin.RecountUsage(ctx)
	require.NoError(t, err)
	require.Equal(t, []inspect.UsageRecount{{Tenant: "acme", WasRecords: want.Records + 5, WasBytes: want.Bytes + 100, Records: want.Records, Bytes: want.Bytes}}, mended)
	problems, err = admin.Check(ctx)
	require.NoError(t, err)
	require.Empty(t, problems)
	got, err := l.Usage(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, do("k2"))
	mended, err = admin.RecountUsage(ctx)
	require.NoError(t, err)
	require.Empty(t, mended)
}

// The console's overview offers the recount to a logged-in admin, as a
// form checked like the other actions (CSRF token, same origin).
func TestConsoleRecountsUsage(t *testing.T) {
	db, x, _ := fixture(t)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, Executor: x})))
	defer srv.Close()
	base := srv.URL + inspect.ConsolePath
	drift(t, db)

	_, body := page(t, &http.Client{}, base)
	require.NotContains(t, body, "usage/recount", "no form without the token")
	jar, _ := cookiejar.New(nil)
	admin := &http.Client{Jar: jar}
	code, body := post(t, admin, base+"login", url.Values{"token": {token}}, srv.URL)
	require.Equal(t, 200, code)
	require.Contains(t, body, `id="recount"`)
	csrf := between(body, `name="csrf" value="`, `"`)
	code, _ = post(t, admin, base+"usage/recount", url.Values{}, srv.URL)
	require.Equal(t, http.StatusForbidden, code, "the session alone is not enough")
	code, _ = post(t, admin, base+"usage/recount", url.Values{"csrf": {csrf}}, "https://evil.example")
	require.Equal(t, http.StatusForbidden, code)

	code, body = post(t, admin, base+"usage/recount", url.Values{"csrf": {csrf}}, srv.URL)
	require.Equal(t, 200, code)
	require.Contains(t, body, "that disagreed with their records is mended")
	_, err = l.Do(ctx, ledger.Request{Scope: "acme|POST /x", Key: "k2", Fingerprint: ledger.Fingerprint{1}}, func(kv.Tx) (ledger.Response, error) {
		return ledger.Response{Status: 201}, nil
	})
	require.NoError(t, err)
	_, body = post(t, admin, base+"usage/recount", url.Values{"csrf": {csrf}}, srv.URL)
	require.Contains(t, body, "already matched its records")
}

// damagedService is a database whose record for key d1 was damaged on
// disk while no one had it open (beside an intact one, "other"), open
// again behind the admin handler, as a service restarted on it.
type damagedService struct {
	db              *kv.DB
	srv             *httptest.Server
	damaged, intact string // their log entries
	runs            int    // how often d1's work ran (do)
	l               *ledger.Ledger
}

func startDamaged(t *testing.T) *damagedService {
	t.Helper()
	path := filepath.Join(t.TempDir(), "d.db")
	s := &damagedService{}
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	s.l, err = ledger.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, s.do())
	_, err = s.l.Do(ctx, ledger.Request{Scope: "acme|POST /x", Key: "other", Fingerprint: ledger.Fingerprint{1}}, func(kv.Tx) (ledger.Response, error) {
		return ledger.Response{Status: 201}, nil
	})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	kvtest.RawUpdate(t, path, func(tx *bolt.Tx) (err error) {
		if s.intact, err = kvtest.DamageLogEntry(tx, "idempotency", kvtest.Naming("acme|POST /x", "other"), func(v []byte) []byte { return v }); err != nil {
			return err
		}
		s.damaged, err = kvtest.DamageLogEntry(tx, "idempotency", kvtest.Naming("acme|POST /x", "d1"), func(v []byte) []byte {
			v[len(v)-5] ^= 1
			return v
		})
		return err
	})
	s.db, err = kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.db.Close() })
	s.l, err = ledger.New(s.db, nil)
	require.NoError(t, err)
	s.srv = httptest.NewServer(must(inspect.Handler(s.db, inspect.HandlerOptions{Token: token})))
	t.Cleanup(s.srv.Close)
	s.runs = 0
	return s
}

// do sends a request with key d1 through the ledger.
func (s *damagedService) do() error {
	_, err := s.l.Do(ctx, ledger.Request{Scope: "acme|POST /x", Key: "d1", Fingerprint: ledger.Fingerprint{1}}, func(kv.Tx) (ledger.Response, error) {
		if kvtest.Counts() {
			s.runs++
		}
		return ledger.Response{Status: 201, Body: []byte("ran")}, nil
	})
	return err
}

// A damaged record in the running service: its key answers with an
// error until the admin endpoint's drop (token only) removes it; then the
// key runs again. An intact record is a 409, no record a 404, a bad kind
// or entry a 400.
func TestDropDamagedThroughTheEndpoint(t *testing.T) {
	s := startDamaged(t)
	damaged, intact := s.damaged, s.intact
	anon := &inspect.Client{BaseURL: s.srv.URL}
	admin := &inspect.Client{BaseURL: s.srv.URL, Token: token}
	require.ErrorIs(t, s.do(), kv.ErrCorrupt)

	_, err := anon.DropDamaged(ctx, "idempotency", damaged)
	require.ErrorContains(t, err, "401")
	_, err = admin.DropDamaged(ctx, "outbox", damaged)
	require.ErrorContains(t, err, "400")
	_, err = admin.DropDamaged(ctx, "idempotency", "xyz")
	require.ErrorContains(t, err, "400")
	_, err = admin.DropDamaged(ctx, "idempotency", intact)
	require.ErrorContains(t, err, "409")
	_, err = admin.DropDamaged(ctx, "inbox", damaged)
	require.ErrorIs(t, err, inspect.ErrNotFound)
	got, err := admin.DropDamaged(ctx, "idempotency", damaged)
	require.NoError(t, err)
	require.Equal(t, inspect.Dropped{Kind: "idempotency", Entry: damaged, Scope: "acme|POST /x", Key: "d1", Reason: "checksum mismatch"}, got)
	require.NoError(t, s.do())
	require.Equal(t, 1, s.runs, "the key ran again")
	problems, err := admin.Check(ctx)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// The console's keys page shows a corrupt record with its log entry, and
// offers an admin the drop, checked like the other actions and confirmed.
func TestConsoleDropsADamagedRecord(t *testing.T) {
	s := startDamaged(t)
	entry, srv := s.damaged, s.srv
	base := srv.URL + inspect.ConsolePath

	code, body := page(t, &http.Client{}, base+"keys")
	require.Equal(t, 200, code)
	require.Contains(t, body, `data-entry="`+entry+`"`)
	require.Contains(t, body, "(log entry "+entry+")")
	require.NotContains(t, body, "keys/drop", "no form without the token")
	keys, err := (&inspect.Client{BaseURL: srv.URL}).Keys(ctx, inspect.KeysQuery{})
	require.NoError(t, err)
	require.Contains(t, []string{keys[0].Entry, keys[1].Entry}, entry, "the admin API names the entry too")

	jar, _ := cookiejar.New(nil)
	admin := &http.Client{Jar: jar}
	code, _ = post(t, admin, base+"login", url.Values{"token": {token}}, srv.URL)
	require.Equal(t, 200, code)
	_, body = page(t, admin, base+"keys")
	require.Contains(t, body, `action="/console/keys/drop"`)
	csrf := between(body, `name="csrf" value="`, `"`)
	code, _ = post(t, admin, base+"keys/drop", url.Values{"id": {entry}, "csrf": {csrf}}, srv.URL)
	require.Equal(t, http.StatusBadRequest, code, "not confirmed")
	code, _ = post(t, admin, base+"keys/drop", url.Values{"id": {entry}, "confirm": {"1"}}, srv.URL)
	require.Equal(t, http.StatusForbidden, code, "no CSRF token")
	require.ErrorIs(t, s.do(), kv.ErrCorrupt, "still there")

	code, body = post(t, admin, base+"keys/drop", url.Values{"id": {entry}, "csrf": {csrf}, "confirm": {"1"}}, srv.URL)
	require.Equal(t, 200, code)
	require.Contains(t, body, "Dropped: the damaged record is gone")
	require.NoError(t, s.do())
	require.Equal(t, 1, s.runs, "the key ran again")
}
