// Package sealing holds what oncekv's packages share to seal their values
// (package seal): the associated data that binds a sealed value to where it
// lives, and a bounded, resumable rewrite of a bucket's values (rekey).
//
// # The model
//
// A sealed value carries the ID of the key that sealed it, and is bound
// by its associated data (AAD: the record kind and where it lives, such
// as its scope and key) to its place: a sealed response copied under
// another key does not open there, so a file edited behind oncekv's back
// cannot make one request replay another's answer. Stale tells a value
// sealed under an older key of the ring. Rewrite re-seals a bucket's
// values in bounded batches, each resumable from the key it returns, so
// rekeying a large file (inspect.Rekey, oncekv rekey) holds the writer
// for short transactions only and survives an interruption.
package sealing
