package kv

import (
	"context"
	"fmt"
	"io"
	"os"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/atomicfile"
)

// Backup writes a copy of the database to w, as of one read transaction:
// every transaction committed before it began, and none after, whatever
// commits meanwhile. The copy is a bbolt file that Open opens as it would
// the original; restoring it is putting it in the original's place while
// the service is stopped. It returns the bytes written (the file's size
// as of that transaction).
//
// Writes go on while it runs, but the read transaction it holds keeps
// bbolt from reusing the pages freed meanwhile (the file grows instead)
// and a commit that has to remap a grown file waits for it: give it a
// fast w (a local file, BackupFile) rather than a slow network peer. ctx
// ends the copy between two writes to w. Values sealed by Options.Cipher
// stay sealed in the copy: it needs the same key to be read.
func (db *DB) Backup(ctx context.Context, w io.Writer) (int64, error) {
	if db.bolt == nil {
		return 0, ErrBackupUnsupported
	}
	n, err := db.backup(ctx, w)
	if err != nil {
		return n, fmt.Errorf("kv: backup of %s: %w", db.path, err)
	}
	return n, nil
}

// backup is Backup on a bbolt database (its callers check).
func (db *DB) backup(ctx context.Context, w io.Writer) (n int64, err error) {
	if err := db.usable(ctx); err != nil {
		return 0, err
	}
	// One read of bbolt's, not db.View: the rerun build must not run a
	// backup twice into w. It waits, as every read does, for a commit
	// whose sync is under way (boltBackend.settle).
	copyTo := func(tx *bolt.Tx) error {
		n, err = tx.WriteTo(ctxWriter{ctx, w})
		return err
	}
	err = db.readFailure(db.backend.(*boltBackend).read(ctx, copyTo)) // db.bolt is set over a boltBackend alone
	if cerr := ctx.Err(); cerr != nil && err != nil {
		err = cerr // bbolt's WriteTo flattens the writer's error into text
	}
	return n, closedErr(err)
}

// BackupFile writes Backup's copy to a new file at path, mode 0600: into a
// temporary file beside it, synced, then linked at path, so that path
// holds a whole copy or nothing. An existing path is refused (ErrExist),
// never replaced; a failed or cancelled copy leaves nothing behind. A
// process killed during the copy leaves its temporary file,
// ".NAME.oncekv-RANDOM.tmp", which the next BackupFile into the same
// directory removes (on Linux, where a lock tells a dead writer's file from
// a live one's).
func (db *DB) BackupFile(ctx context.Context, path string) (int64, error) {
	if db.bolt == nil {
		return 0, ErrBackupUnsupported
	}
	n, err := atomicfile.Create(path, func(f *os.File) (int64, error) { return db.backup(ctx, atomicfile.Paced(f)) })
	if err != nil {
		return n, fmt.Errorf("kv: backup of %s to %s: %w", db.path, path, err)
	}
	return n, nil
}

// ctxWriter is w that fails with ctx's error once ctx ends.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
