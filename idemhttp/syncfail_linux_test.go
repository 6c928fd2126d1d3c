package idemhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/syncfault"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// A payment whose commit's sync fails after the meta page was written (a
// disk that failed the write-back, injected by strace) is answered 503
// with Retry-After, and so is every request after it, its retries
// included, without running the handler: the database refuses calls
// until it is reopened, and the failure is logged as an error. After the
// restart the retry is answered from the disk (here the commit's: a
// replay), and the handler ran once in all.
func TestSyncFailedPaymentIsChargedOnce(t *testing.T) {
	serve := func(db *kv.DB, mw *idemhttp.Middleware) func(key string) *httptest.ResponseRecorder {
		h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, _ := idemhttp.Tx(r.Context())
			if err := kvtest.Increment(tx, "charges", "ord_1"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, "charged ord_1")
		}))
		return func(key string) *httptest.ResponseRecorder {
			// In process, on this goroutine: the child's commits must run on
			// its thread (package syncfault).
			req := httptest.NewRequest(http.MethodPost, "/v1/orders/ord_1/pay", strings.NewReader(`{"amount":2500}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w
		}
	}
	if syncfault.Child() {
		db, err := kv.Open(os.Getenv("IDEMHTTP_SYNCFAIL_PATH"), nil)
		require.NoError(t, err)
		mw, logs := loggedMiddleware(t, db)
		pay := serve(db, mw)
		for i := range 3 { // the first attempt's commit fails at its sync (sync 2); the retries are refused
			w := pay("pay-1")
			require.Equal(t, http.StatusServiceUnavailable, w.Code, "attempt %d: %s", i, w.Body)
			require.Equal(t, "1", w.Header().Get("Retry-After"))
			require.Contains(t, w.Body.String(), "takes no request until it is reopened")
		}
		require.Contains(t, logs.String(), `level=ERROR msg="idempotent request refused: the database's sync failed`)
		// The attempt whose commit failed may be on the disk (pending); the
		// retries refused before running were not stored.
		st := mw.Stats()
		require.Equal(t, uint64(1), st.Pending, "%+v", st)
		require.Equal(t, uint64(2), st.NotStored, "%+v", st)
		require.NoError(t, db.Close())
		return
	}

	path := filepath.Join(t.TempDir(), "payments.db")
	db := kvtest.OpenPath(t, path, nil, ledger.RecordKind)
	kvtest.RequireBolt(t, db)
	_, err := ledger.New(db, nil) // its first open writes: not the child's
	require.NoError(t, err)
	require.NoError(t, db.Close())
	syncfault.Run(t, "2", "IDEMHTTP_SYNCFAIL_PATH="+path)

	db = kvtest.OpenPath(t, path, nil, ledger.RecordKind)
	mw, _ := loggedMiddleware(t, db)
	w := serve(db, mw)("pay-1")
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	require.Equal(t, "charged ord_1", w.Body.String())
	require.Equal(t, "true", w.Header().Get(idemhttp.HeaderReplayed))
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		require.Equal(t, 1, kvtest.Counter(tx, "charges", "ord_1"), "charged once")
		return nil
	}))
}

// A request whose handler meets a page the disk cannot read (powercut's
// power is cut: a page bbolt's map has not read yet faults) is answered
// 503 with Retry-After, and so is every request after it: the database
// refuses calls (kv.ErrReadFailed) until it is reopened, and the failure
// is logged as an error. Before, the process ended ("unexpected fault
// address").
func TestUnreadablePageIsAnswered503(t *testing.T) {
	bin := kvtest.PowercutProgram(t)
	state := t.TempDir()
	db, err := kv.Open(filepath.Join(state, "payments.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	_, err = ledger.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(t.Context(), func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		for i := 0; err == nil && i < 4000; i++ { // some 200 leaf pages
			err = b.Put(fmt.Appendf(nil, "ord_%05d", i), make([]byte, 200))
		}
		return err
	}))
	require.NoError(t, db.Close())

	mnt := t.TempDir()
	disk := kvtest.MountPowerDisk(t, bin, mnt, state)
	db, err = kv.Open(filepath.Join(mnt, "payments.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() }) // before the disk's unmount; writes nothing
	mw, logs := loggedMiddleware(t, db)
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx(r.Context())
		if tx.Bucket([]byte("orders")).Get([]byte("ord_02000")) == nil { // a leaf the map has not read
			http.Error(w, "no such order", http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	_, _, err = disk.CutWhile(kvtest.Cut{Image: filepath.Join(t.TempDir(), "image"), Seed: 1}, nil)
	require.NoError(t, err)
	for i := range 2 {
		req := httptest.NewRequest(http.MethodPost, "/v1/orders/ord_02000/pay", strings.NewReader(`{"amount":2500}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "pay-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		require.Equal(t, http.StatusServiceUnavailable, w.Code, "attempt %d: %s", i, w.Body)
		require.Equal(t, "1", w.Header().Get("Retry-After"))
	}
	require.Contains(t, logs.String(), `level=ERROR msg="idempotent request refused: the database's file could not be read`)
	require.ErrorIs(t, db.Err(), kv.ErrReadFailed)
	_ = db.Close() // writes nothing; the close of a file on a disk without power fails
	disk.Unmount()
}

// A handler that faults on memory of its own (a file it maps, cut short
// beneath it) gets what any panicking handler gets: a 500, its
// transaction rolled back, the key free for a retry. The database is not
// at fault and serves on; before kv told the faults apart by the address,
// this one made it refuse every call (a 503 to every request until a
// restart).
func TestAFaultOnTheHandlersOwnMapIsA500(t *testing.T) {
	db, err := kv.Open(filepath.Join(t.TempDir(), "payments.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	mw, logs := loggedMiddleware(t, db)
	own := kvtest.CutShortMap(t)
	var faulting atomic.Bool // until the first answer: a rerun build runs each transaction twice
	faulting.Store(true)
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx(r.Context())
		b, err := tx.CreateBucketIfNotExists([]byte("payments"))
		if err == nil {
			err = b.Put([]byte("pay-1"), []byte("2500"))
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if faulting.Load() {
			faultSink += own[0] // the rates file this handler maps, cut short
		}
		w.WriteHeader(http.StatusCreated)
	}))
	send := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/orders/ord_1/pay", strings.NewReader(`{"amount":2500}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "pay-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	w := send()
	faulting.Store(false)
	require.Equal(t, http.StatusInternalServerError, w.Code, w.Body.String())
	require.Contains(t, logs.String(), `level=ERROR msg="handler panicked; transaction rolled back"`)
	require.Contains(t, logs.String(), `panic="runtime error: invalid memory address`, "the fault is the handler's panic")
	require.NoError(t, db.Err(), "the database is not at fault")
	require.NoError(t, db.View(t.Context(), func(tx kv.Tx) error {
		require.Nil(t, tx.Bucket([]byte("payments")), "the faulting run's write was rolled back")
		return nil
	}))

	w = send()
	require.Equal(t, http.StatusCreated, w.Code, "the retry runs again: %s", w.Body)
	require.Empty(t, w.Header().Get(idemhttp.HeaderReplayed))
	w = send()
	require.Equal(t, http.StatusCreated, w.Code)
	require.Equal(t, "true", w.Header().Get(idemhttp.HeaderReplayed))
	require.NoError(t, db.View(t.Context(), func(tx kv.Tx) error {
		require.Equal(t, []byte("2500"), tx.Bucket([]byte("payments")).Get([]byte("pay-1")))
		return nil
	}))
}

// faultSink keeps the reads of a faulting map from being optimised away.
var faultSink byte
