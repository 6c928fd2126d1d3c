package bench

import bolt "go.etcd.io/bbolt"

type boltTx = bolt.Tx
