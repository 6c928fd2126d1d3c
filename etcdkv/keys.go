package etcdkv

import (
	"encoding/binary"

	"github.com/oncekv/oncekv/kv"
)

// keys lays the port's buckets out in etcd's flat, byte-ordered key space,
// under the backend's prefix P:
//
//	P "b" bucket                      the bucket exists (empty value)
//	P "k" uvarint(len) bucket key     a value
//	P "s" bucket                      the bucket's sequence (decimal)
//	P "g" bucket                      the bucket's delete generation
//	P "t" id                          a commit marker (leased)
//
// The length prefix keeps one bucket's keys together and in key order, and
// a bucket whose name is a prefix of another's apart from it. The delete
// generation is written by every transaction that deletes in the bucket,
// and compared by every transaction that scanned it: a range compare cannot
// see a key that no longer exists.
type keys struct{ prefix string }

func (k keys) bucketMarker(bucket []byte) string { return k.prefix + "b" + string(bucket) }
func (k keys) bucketsRange() (string, string)    { return k.prefix + "b", k.prefix + "c" }
func (k keys) seq(bucket []byte) string          { return k.prefix + "s" + string(bucket) }
func (k keys) delgen(bucket []byte) string       { return k.prefix + "g" + string(bucket) }
func (k keys) marker(id string) string           { return k.prefix + "t" + id }

// dataPrefix is the common prefix of bucket's values.
func (k keys) dataPrefix(bucket []byte) string {
	p := binary.AppendUvarint([]byte(k.prefix+"k"), uint64(len(bucket)))
	return string(append(p, bucket...))
}

func (k keys) data(bucket, key []byte) string { return k.dataPrefix(bucket) + string(key) }

// prefixEnd is the first key after every key that starts with p.
func prefixEnd(p string) string {
	if end := kv.PrefixEnd([]byte(p)); end != nil {
		return string(end)
	}
	return "\x00" // no end: etcd's "to the end of the key space"
}
