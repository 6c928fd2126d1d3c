package kv

import (
	"sync"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/seal"
)

// boltCiphers maps the bbolt handles of open DBs to their key rings: a
// bbolt transaction (handed out as a conversion of *bolt.Tx, with no room
// for a pointer) finds its DB's ring through its handle.
var boltCiphers sync.Map // *bolt.DB → *seal.Ring

// Cipher returns the key ring set in Options.Cipher (nil if none): the
// packages built on kv seal what they store on the caller's behalf with it.
func (db *DB) Cipher() *seal.Ring { return db.opts.Cipher }

// CipherOf returns the key ring of the DB a transaction belongs to (nil if
// it has none): code handed only a Tx (sideeffect.CreateTx, outbox.AddTx,
// a conditional table's writes) seals with it. A transaction wrapped by
// WrapTx finds the ring of the DB opened or wrapped over the same bbolt
// handle.
func CipherOf(tx Tx) *seal.Ring {
	for {
		switch t := tx.(type) {
		case *guarded:
			if t.db != nil {
				return t.db.opts.Cipher
			}
			tx = t.tx
		case *guardedBolt:
			return boltCipher((*bolt.Tx)(t))
		case *boltTx:
			return boltCipher((*bolt.Tx)(t))
		case interface{ Unwrap() Tx }:
			tx = t.Unwrap()
		default:
			return nil
		}
	}
}

func boltCipher(tx *bolt.Tx) *seal.Ring {
	if r, ok := boltCiphers.Load(tx.DB()); ok {
		return r.(*seal.Ring)
	}
	return nil
}
