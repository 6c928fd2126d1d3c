// Package sealtest is the test kit for encryption at rest: deterministic
// keys and key rings, so a test can reopen a database with "the same key",
// and a rekey loop over one package's Reseal.
package sealtest
