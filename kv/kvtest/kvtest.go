// Package kvtest opens databases for tests: a fresh file under t.TempDir,
// checked for consistency (bbolt's check plus every registered oncekv
// invariant) and closed when the test ends.
package kvtest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/oncekv/oncekv/kv"
)

// Open opens a new database in a temporary directory. opts may be nil. When
// the test ends, the database is checked with kv.DB.Check and closed; any
// problem fails the test.
func Open(t testing.TB, opts *kv.Options) *kv.DB {
	t.Helper()
	return OpenPath(t, filepath.Join(t.TempDir(), "test.db"), opts)
}

// OpenPath is Open at a caller-chosen path.
func OpenPath(t testing.TB, path string, opts *kv.Options) *kv.DB {
	t.Helper()
	db, err := kv.Open(path, opts)
	if err != nil {
		t.Fatalf("dbtest: open %s: %v", path, err)
	}
	t.Cleanup(func() {
		MustCheck(t, db)
		if err := db.Close(); err != nil {
			t.Errorf("dbtest: close: %v", err)
		}
	})
	return db
}

// MustCheck fails the test if db has any consistency problem. A closed db is
// skipped (tests that close and reopen check the reopened handle).
func MustCheck(t testing.TB, db *kv.DB) {
	t.Helper()
	problems, err := db.Check(context.Background())
	if err == kv.ErrClosed {
		return
	}
	if err != nil {
		t.Errorf("dbtest: check: %v", err)
		return
	}
	for _, p := range problems {
		t.Errorf("dbtest: consistency problem: %s", p)
	}
}

// NoSync returns options for fast tests that do not need durability.
func NoSync(clock kv.Clock) *kv.Options {
	return &kv.Options{NoSync: true, Clock: clock}
}
