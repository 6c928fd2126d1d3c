package recstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
)

// TailFormat is the format version the log layout writes: records in the
// log (format 2), its newest entries in the tail (tail.go, format 3). A
// file of an earlier format is stamped with it when first opened for
// writing, before any record moves from the keyed layout (format 1) and
// before any entry goes to the tail, so an older oncekv refuses the file
// instead of missing records it cannot see.
const TailFormat = 3

// MigrateBatch bounds the records moved per write transaction, so a
// migration never stalls other writers for long.
const MigrateBatch = 1000

// ErrNeedsMigration is returned when a database opened read-only still
// keeps records in the format-1 layout.
var ErrNeedsMigration = errors.New("recstore: records are in the format-1 layout")

// migrateKeyed moves the records of the keyed layout into the log, in
// batches, before the directory is built.
func migrateKeyed(ctx context.Context, db *kv.DB, s *logStore) error {
	k := Keyed(s.spec).(*keyed)
	var pending bool
	var format uint32
	err := db.View(ctx, func(tx kv.Tx) error {
		var err error
		if format, err = keyspace.StoredFormat(tx); err != nil {
			return err
		}
		if b := k.records.Bucket(tx); b != nil {
			first, _ := b.Cursor().First()
			pending = first != nil
		}
		if b := k.expiry.Namespace().Bucket(tx); b != nil && !pending {
			first, _ := b.Cursor().First()
			pending = first != nil
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case db.ReadOnly() && pending:
		return fmt.Errorf("%w: %s holds %s records of oncekv format %d; open it for writing once (a service does when it starts) or run `oncekv migrate --db %s`",
			ErrNeedsMigration, db.Path(), s.spec.Name, format, db.Path())
	case db.ReadOnly():
		return nil
	}
	if format < TailFormat {
		if err := db.Update(ctx, func(tx kv.Tx) error { return keyspace.StampFormat(tx, TailFormat) }); err != nil {
			return err
		}
	}
	for pending {
		err := db.Update(ctx, func(tx kv.Tx) error {
			var err error
			pending, err = s.migrateBatch(tx, k)
			return err
		})
		if err != nil {
			return fmt.Errorf("recstore: migrate %s records to the log: %w", s.spec.Name, err)
		}
		failpoint.Inject(failpoint.RecstoreMigrated)
	}
	return nil
}

// removeOldStamp removes, from a writable database, the bucket where
// earlier builds kept the tally's stamp: the stamp is the tail's sequence
// now (tally.go), and that bucket would only mislead a reader of the file.
// Nothing reads it, so on a full disk, where its removal cannot commit,
// the open goes on without it and the next open tries again.
func removeOldStamp(ctx context.Context, db *kv.DB, spec Spec) error {
	name := spec.oldTallyNS().Bytes()
	var found bool
	err := db.View(ctx, func(tx kv.Tx) error {
		found = kv.BoltTx(tx).Bucket(name) != nil
		return nil
	})
	if err != nil || !found || db.ReadOnly() {
		return err
	}
	err = db.Update(ctx, func(tx kv.Tx) error {
		if bt := kv.BoltTx(tx); bt.Bucket(name) != nil {
			return bt.DeleteBucket(name)
		}
		return nil
	})
	if err != nil && !kv.IsNoSpace(err) {
		return fmt.Errorf("recstore: remove the %s bucket an earlier build kept: %w", spec.oldTallyNS().Name(), err)
	}
	return nil
}

// migrateBatch moves up to MigrateBatch records, in expiry order, from the
// keyed layout to the log; records without an expiry entry (an index that
// was already inconsistent) move last, kept forever. It reports whether
// records remain, and drops the keyed buckets when none do.
func (s *logStore) migrateBatch(tx kv.Tx, k *keyed) (bool, error) {
	records := k.records.Bucket(tx)
	log, err := s.log.Create(tx)
	if err != nil {
		return false, err
	}
	moved := 0
	for _, d := range k.expiry.Due(tx, keyspace.Never, nil, MigrateBatch) {
		var v []byte
		if records != nil {
			v = records.Get(d.Key)
		}
		if v != nil {
			if err := s.move(tx, log, records, d.Key, v, d.At); err != nil {
				return false, err
			}
		}
		if err := k.expiry.Delete(tx, d.At, d.Key); err != nil {
			return false, err
		}
		moved++
	}
	if moved == MigrateBatch {
		return true, nil
	}
	if records != nil {
		var keys [][]byte
		c := records.Cursor()
		for key, _ := c.First(); key != nil && moved+len(keys) < MigrateBatch; key, _ = c.Next() {
			keys = append(keys, append([]byte(nil), key...))
		}
		for _, key := range keys {
			if err := s.move(tx, log, records, key, records.Get(key), keyspace.Never); err != nil {
				return false, err
			}
		}
		if moved+len(keys) == MigrateBatch {
			return true, nil
		}
	}
	bt := kv.BoltTx(tx)
	for _, name := range [][]byte{k.records.Bytes(), k.expiry.Namespace().Bytes()} {
		if bt.Bucket(name) != nil {
			if err := bt.DeleteBucket(name); err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

func (s *logStore) move(tx kv.Tx, log, records kv.Bucket, key, v []byte, expiry time.Time) error {
	scope, k, ok := splitKey(key)
	if !ok {
		scope, k = nil, key // a damaged key: moved as it is, reported by the check
	}
	if err := log.Put(posKey(s.newPos(tx, expiry)), wrap(string(scope), string(k), v)); err != nil {
		return err
	}
	return records.Delete(key)
}
