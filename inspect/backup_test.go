package inspect_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
)

// GET /backup sends a copy of the live database to the token's holder
// only; the copy, opened as a database, replays the stored answer byte
// for byte without running the work again, and holds the parked intent.
// One backup at a time; nothing is left in the spool directory.
func TestHandlerServesABackupThatReplays(t *testing.T) {
	db := kvtest.Open(t, &kv.Options{NoSync: true})
	_, id := fixtureOn(t, db)
	spool := t.TempDir()
	h, returned := waiting(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, BackupDir: spool})))
	srv := httptest.NewServer(h)
	defer srv.Close()
	open := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{})))
	defer open.Close()

	code, _ := get(t, srv, "/backup", "", "")
	require.Equal(t, http.StatusUnauthorized, code, "no token: no copy")
	code, _ = get(t, srv, "/backup", "", "wrong")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get(t, open, "/backup", "", "")
	require.Equal(t, http.StatusForbidden, code, "no token configured: no copy, even on loopback")
	head, err := http.NewRequestWithContext(ctx, http.MethodHead, srv.URL+"/backup", nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(head)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "HEAD too")

	admin := &inspect.Client{BaseURL: srv.URL, Token: token}
	if db.Bolt() == nil { // the etcd matrix
		_, err := db.Backup(ctx, io.Discard)
		require.ErrorIs(t, err, kv.ErrBackupUnsupported)
		_, err = db.BackupFile(ctx, filepath.Join(t.TempDir(), "copy.db"))
		require.ErrorIs(t, err, kv.ErrBackupUnsupported)
		code, body := get(t, srv, "/backup", "", token)
		require.Equal(t, http.StatusNotImplemented, code)
		require.Contains(t, body, "etcdctl snapshot save")
		return
	}

	// HEAD says what a GET would send without making the copy: nothing
	// spooled, the file's size.
	head.Header.Set("Authorization", "Bearer "+token)
	resp, err = srv.Client().Do(head)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))

	var copied bytes.Buffer
	n, err := admin.Backup(ctx, &copied)
	require.NoError(t, err)
	require.Equal(t, int64(copied.Len()), n)
	require.Equal(t, n, resp.ContentLength, "HEAD's length is the copy's (nothing was written between)")
	path := filepath.Join(t.TempDir(), "restored.db")
	require.NoError(t, os.WriteFile(path, copied.Bytes(), 0o600))
	restored := kvtest.OpenPath(t, path, nil)

	l, err := ledger.New(restored, nil)
	require.NoError(t, err)
	ran := false
	out, err := l.Do(ctx, ledger.Request{Scope: "acme|POST /x", Key: "k1", Fingerprint: ledger.Fingerprint{1}}, func(kv.Tx) (ledger.Response, error) {
		ran = true
		return ledger.Response{Status: 500}, nil
	})
	require.NoError(t, err)
	require.False(t, ran, "the copy remembers the key")
	require.True(t, out.Replayed)
	require.Equal(t, 201, out.Response.Status)
	require.Equal(t, "secret body", string(out.Response.Body))
	intents, err := must(inspect.New(restored)).Intents(ctx, sideeffect.StateNeedsAttention.String(), 0)
	require.NoError(t, err)
	require.Len(t, intents, 1)
	require.Equal(t, id, intents[0].ID)

	entries, err := os.ReadDir(spool)
	require.NoError(t, err)
	require.Empty(t, entries, "the spooled copy is removed")

	// A database that refuses calls (closed here) has no copy to
	// describe: HEAD answers as a GET does, not 200 with a length of 0.
	// (The copy's handler returns after its client has read it all, and
	// until then a GET is the next backup, refused with 409.)
	returned()
	require.NoError(t, db.Close())
	for _, method := range []string{http.MethodHead, http.MethodGet} {
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+"/backup", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err = srv.Client().Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode, method)
	}
}

// One backup at a time: while a copy is being sent (its client has not
// read it yet), another request answers 409; once it is read whole, the
// next is served. The database is larger than the sockets' buffers, so
// the first copy is still being sent.
func TestHandlerSendsOneBackupAtATime(t *testing.T) {
	db := kvtest.Open(t, &kv.Options{NoSync: true})
	kvtest.RequireBolt(t, db)
	chunk := bytes.Repeat([]byte{'x'}, 1<<20)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("big"))
		if err != nil {
			return err
		}
		for i := range 48 {
			if err := b.Put([]byte(strconv.Itoa(i)), chunk); err != nil {
				return err
			}
		}
		return nil
	}))
	h := must(inspect.Handler(db, inspect.HandlerOptions{Token: token, BackupDir: t.TempDir()}))
	served := make(chan struct{}, 4) // a request's handler has returned
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		served <- struct{}{}
	}))
	defer srv.Close()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/backup", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	first, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer first.Body.Close()
	require.Equal(t, http.StatusOK, first.StatusCode)
	require.Greater(t, first.ContentLength, int64(48<<20))
	require.Equal(t, `attachment; filename=test.backup.db`, first.Header.Get("Content-Disposition"))
	require.Equal(t, "application/octet-stream", first.Header.Get("Content-Type"))

	code, body := get(t, srv, "/backup", "", token)
	require.Equal(t, http.StatusConflict, code, body)

	n, err := io.Copy(io.Discard, first.Body)
	require.NoError(t, err)
	require.Equal(t, first.ContentLength, n)
	require.NoError(t, first.Body.Close())
	testwait.Receive(t, served, "the refused request's handler returned")
	testwait.Receive(t, served, "the first backup's handler returned")
	admin := &inspect.Client{BaseURL: srv.URL, Token: token}
	m, err := admin.Backup(ctx, io.Discard)
	require.NoError(t, err)
	require.Equal(t, n, m)
}

// The console offers the admin, once logged in, a backup to download
// (bbolt only); before that it offers none and refuses the download.
func TestConsoleOffersABackupToTheAdmin(t *testing.T) {
	db := kvtest.Open(t, &kv.Options{NoSync: true})
	fixtureOn(t, db)
	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, BackupDir: t.TempDir()})))
	defer srv.Close()
	base := srv.URL + inspect.ConsolePath
	anon := &http.Client{}
	code, body := page(t, anon, base)
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, `id="backup"`)
	code, _ = page(t, anon, base+"backup")
	require.Equal(t, http.StatusUnauthorized, code)

	jar, _ := cookiejar.New(nil)
	admin := &http.Client{Jar: jar}
	code, body = post(t, admin, base+"login", url.Values{"token": {token}}, srv.URL)
	require.Equal(t, http.StatusOK, code)
	if db.Bolt() == nil { // the etcd matrix: etcd's snapshots, not ours
		require.NotContains(t, body, `id="backup"`)
		return
	}
	require.Contains(t, body, `<a href="`+inspect.ConsolePath+`backup" id="backup" download>`, "the overview links to the download")
	code, copied := page(t, admin, base+"backup")
	require.Equal(t, http.StatusOK, code)
	path := filepath.Join(t.TempDir(), "from-console.db")
	require.NoError(t, os.WriteFile(path, []byte(copied), 0o600))
	restored := kvtest.OpenPath(t, path, nil)
	rec, err := must(inspect.New(restored)).Get(ctx, "acme|POST /x", "k1", true)
	require.NoError(t, err)
	require.Equal(t, 201, rec.ResponseStatus)
}

// A BackupDir that cannot take the copy answers 500 naming it, and the
// database's own directory is the default.
func TestHandlerBackupDir(t *testing.T) {
	db := kvtest.Open(t, &kv.Options{NoSync: true})
	kvtest.RequireBolt(t, db)
	missing := filepath.Join(t.TempDir(), "missing")
	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, BackupDir: missing})))
	defer srv.Close()
	code, body := get(t, srv, "/backup", "", token)
	require.Equal(t, http.StatusInternalServerError, code)
	var answer struct{ Error string }
	require.NoError(t, json.Unmarshal([]byte(body), &answer), body)
	require.Contains(t, answer.Error, missing) // decoded: JSON doubles a Windows path's backslashes

	h, returned := waiting(must(inspect.Handler(db, inspect.HandlerOptions{Token: token})))
	def := httptest.NewServer(h)
	defer def.Close()
	n, err := (&inspect.Client{BaseURL: def.URL, Token: token}).Backup(ctx, io.Discard)
	require.NoError(t, err)
	require.Positive(t, n)
	returned() // where the copy cannot be unlinked while open (Windows), its handler removes it as it returns
	entries, err := os.ReadDir(filepath.Dir(db.Path()))
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the database: the spooled copy is gone")
}

// A service whose admin endpoint has no /backup (an oncekv before
// backups, a proxy in the way) gets an error that says what it answered.
func TestClientBackupFromAnEndpointWithoutOne(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	var w bytes.Buffer
	_, err := (&inspect.Client{BaseURL: srv.URL, Token: token}).Backup(ctx, &w)
	require.ErrorContains(t, err, "404 Not Found: 404 page not found")
	require.Zero(t, w.Len())

	// A 200 of unknown length is not a backup: a copy cut short could not
	// be told from a whole one.
	chunked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("not a database"))
		w.(http.Flusher).Flush() // sent before its end is known: chunked
	}))
	defer chunked.Close()
	_, err = (&inspect.Client{BaseURL: chunked.URL, Token: token}).Backup(ctx, &w)
	require.ErrorContains(t, err, "without a Content-Length")
	require.Zero(t, w.Len())
}

// waiting wraps h, and returned waits until every request h began has
// returned: a handler may still run after its client has read the whole
// answer (a backup's handler gives the next backup its turn, and removes
// its spooled copy, only then).
func waiting(h http.Handler) (wrapped http.Handler, returned func()) {
	var running sync.WaitGroup
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Add(1)
		defer running.Done()
		h.ServeHTTP(w, r)
	}), running.Wait
}
