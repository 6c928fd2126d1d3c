package kv_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// A page the disk cannot read (powercut's power is cut: every read fails
// with EIO, and a page bbolt's memory map has not read yet faults) makes
// the call that met it fail with ErrReadFailed, and the DB refuse every
// call from then on (Done closes), instead of the Go runtime ending the
// process ("unexpected fault address"). A View, an Update and a Batch,
// each on a fresh open, meet it.
func TestAPageTheDiskCannotReadIsRefusedNotFatal(t *testing.T) {
	bin := kvtest.PowercutProgram(t)
	state := t.TempDir()
	db, err := kv.Open(filepath.Join(state, "orders.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		for i := range 4000 { // some 200 leaf pages
			if err := b.Put(fmt.Appendf(nil, "order-%05d", i), make([]byte, 200)); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, db.Close())

	readAll := func(tx kv.Tx) error {
		c := tx.Bucket([]byte("orders")).Cursor()
		n := 0
		for k, v := c.First(); k != nil; k, v = c.Next() {
			n += len(v)
		}
		return fmt.Errorf("read %d bytes of a disk that fails every read", n)
	}
	for name, call := range map[string]func(db *kv.DB) error{
		"view":   func(db *kv.DB) error { return db.View(ctx, readAll) },
		"update": func(db *kv.DB) error { return db.Update(ctx, readAll) },
		"batch":  func(db *kv.DB) error { return db.Batch(ctx, readAll) },
	} {
		t.Run(name, func(t *testing.T) {
			mnt := t.TempDir()
			disk := kvtest.MountPowerDisk(t, bin, mnt, state)
			db, err := kv.Open(filepath.Join(mnt, "orders.db"), nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() }) // before the disk's unmount
			// bbolt opens the file anew after kv's walk: its map has read
			// the meta pages and the freelist, not the orders.
			_, _, err = disk.CutWhile(kvtest.Cut{Image: filepath.Join(t.TempDir(), "image"), Seed: 1}, nil)
			require.NoError(t, err)
			err = call(db)
			require.ErrorIs(t, err, kv.ErrReadFailed)
			require.ErrorContains(t, err, "close it and open it again")
			require.ErrorIs(t, db.Err(), kv.ErrReadFailed)
			select {
			case <-db.Done():
			default:
				t.Fatal("Done is open on a DB that refuses calls")
			}
			require.ErrorIs(t, db.View(context.Background(), func(kv.Tx) error { return nil }), kv.ErrReadFailed, "every call refused")
			_ = db.Close() // writes nothing; the close of a file on a disk without power fails
			disk.Unmount()
		})
	}
}
