package kvtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/rerun"
	"github.com/oncekv/oncekv/kv"
)

// Open opens a new database in a temporary directory. opts may be nil. When
// the test ends, the database is checked with kv.DB.Check (bbolt's page
// check, the format record and every checker given) and closed; any problem
// fails the test.
func Open(t testing.TB, opts *kv.Options, checks ...kv.Checker) *kv.DB {
	t.Helper()
	return OpenPath(t, filepath.Join(t.TempDir(), "test.db"), opts, checks...)
}

// OpenPath is Open at a caller-chosen path. Opening the same path again
// (after Close) reaches the same data.
//
// Every database it opens checks nesting (kv.Options.CheckNesting): a
// write started inside a write transaction's function fails the test with
// kv.ErrNestedTx instead of hanging it.
//
// With ONCEKV_TEST_REMOTE set (see Serve), the database is a fresh backend
// of that server, named by path, instead of a bbolt file: the test matrix
// runs every package's tests on etcd this way.
func OpenPath(t testing.TB, path string, opts *kv.Options, checks ...kv.Checker) *kv.DB {
	t.Helper()
	var o kv.Options
	if opts != nil {
		o = *opts
	}
	o.CheckNesting = true // a nested write fails the test instead of hanging it
	opts = &o
	var db *kv.DB
	var err error
	if Remote() {
		var b kv.Backend
		if b, err = openRemote(path); err == nil {
			db, err = kv.New(b, opts)
		}
	} else {
		db, err = kv.Open(path, opts)
	}
	if err != nil {
		t.Fatalf("kvtest: open %s: %v", path, err)
	}
	Cleanup(t, db, checks...)
	return db
}

// Remote reports whether the tests run against a remote backend
// (ONCEKV_TEST_REMOTE).
func Remote() bool { return os.Getenv(EnvRemote) != "" }

// RequireLocal skips the test in a remote run (ONCEKV_TEST_REMOTE): the
// test works on bbolt's own file (raw pages, a process killed over it) or
// on what only one writer process allows; why says which.
func RequireLocal(t testing.TB, why string) {
	t.Helper()
	if Remote() {
		t.Skipf("kvtest: not on a remote backend: %s", why)
	}
}

// RunsTwice reports whether this is a build with -tags oncekv_rerun
// (package internal/rerun), where every bbolt transaction runs its
// function twice: a test that counts what its reads read expects twice
// as much there.
func RunsTwice() bool { return rerun.Enabled }

// RequireOneRun skips the test in a build with -tags oncekv_rerun (package
// internal/rerun), where every bbolt transaction runs its function twice:
// a test that counts bbolt's own transactions, or pins what a single run
// of a function does, does not apply there; why says which.
func RequireOneRun(t testing.TB, why string) {
	t.Helper()
	if rerun.Enabled {
		t.Skipf("kvtest: not in a rerun build: %s", why)
	}
}

// RequireSingleWriter skips the test unless db's backend has one writer
// process (bbolt): a test of what only that allows (a dead incarnation's
// claims taken over at once) does not apply to several writers.
func RequireSingleWriter(t testing.TB, db *kv.DB) {
	t.Helper()
	if !db.Traits().SingleWriter {
		t.Skipf("kvtest: needs one writer process; this run's backend (%s) has several", db.Traits().Name)
	}
}

// RequireGroupCommit skips the test unless db's backend commits several
// calls in one transaction (bbolt): a test of how a batch forms, or of a
// call run again after another call of its batch failed, does not apply
// to a backend where each call is a transaction of its own (etcd).
func RequireGroupCommit(t testing.TB, db *kv.DB) {
	t.Helper()
	if !db.Traits().GroupCommit {
		t.Skipf("kvtest: needs group commit; this run's backend (%s) makes each call a transaction of its own", db.Traits().Name)
	}
}

// RequireBolt skips the test unless db is a bbolt file: a test that works on
// bbolt's own structures, or relies on one writer process, does not apply
// to other backends.
func RequireBolt(t testing.TB, db *kv.DB) {
	t.Helper()
	if db.Bolt() == nil {
		t.Skipf("kvtest: needs a bbolt file; this run's backend is %s", db.Traits().Name)
	}
}

// Cleanup checks db with the given checkers and closes it when the test
// ends, for a DB the test opened itself (on any backend).
func Cleanup(t testing.TB, db *kv.DB, checks ...kv.Checker) {
	t.Helper()
	t.Cleanup(func() {
		MustCheck(t, db, checks...)
		if err := db.Close(); err != nil {
			t.Errorf("kvtest: close: %v", err)
		}
	})
}

// MustCheck fails the test if db has any consistency problem. A db that
// refuses calls is skipped: closed (tests that close and reopen check the
// reopened handle), or after a failed sync or a read fault (kv.DB.Err; the
// next open checks the file).
func MustCheck(t testing.TB, db *kv.DB, checks ...kv.Checker) {
	t.Helper()
	if db.Err() != nil {
		return
	}
	problems, err := db.Check(context.Background(), checks...)
	if errors.Is(err, kv.ErrClosed) { // closed meanwhile
		return
	}
	if err != nil {
		t.Errorf("kvtest: check: %v", err)
		return
	}
	for _, p := range problems {
		t.Errorf("kvtest: consistency problem: %s", p)
	}
}

// NoSync returns options for fast tests that do not need durability.
func NoSync(clock kv.Clock) *kv.Options {
	return &kv.Options{NoSync: true, Clock: clock}
}

// WriteFormat stamps the bbolt file at path (creating it if needed) with
// format version v, so tests can produce a file from a "newer" oncekv.
func WriteFormat(t testing.TB, path string, v uint32) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatalf("kvtest: open %s: %v", path, err)
	}
	defer func() { _ = b.Close() }()
	err = b.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists([]byte(record.MetaBucket))
		if err != nil {
			return err
		}
		return bk.Put(record.FormatKey, record.EncodeFormat(v))
	})
	if err != nil {
		t.Fatalf("kvtest: write format: %v", err)
	}
}

// DropFreelist leaves the closed bbolt file at path as a process killed
// after a commit leaves it with kv's default settings (Options.SyncFreelist
// false): without bbolt's freelist, which the next writable open rebuilds
// by walking the file.
func DropFreelist(t testing.TB, path string) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, NoSync: true})
	if err != nil {
		t.Fatalf("kvtest: open %s: %v", path, err)
	}
	if err := b.Update(func(*bolt.Tx) error { return nil }); err != nil { // a commit that leaves the freelist out
		t.Fatalf("kvtest: commit: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("kvtest: close: %v", err)
	}
}
