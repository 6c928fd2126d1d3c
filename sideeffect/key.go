package sideeffect

import "github.com/google/uuid"

// KeyNamespace is the UUID namespace of downstream keys: the UUIDv5 of the
// URL "https://github.com/oncekv/oncekv/downstream-key" in the URL namespace.
var KeyNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/oncekv/oncekv/downstream-key"))

// DownstreamKey derives the key sent to an outside system for one side
// effect: the UUIDv5 (SHA-1, RFC 9562) of scope, key and purpose joined by
// NUL bytes, in KeyNamespace. It is deterministic, so every retry and every
// process restart sends the provider the same key, and it never repeats
// across scopes or purposes ("charge" and "refund" of one request get
// different keys).
//
//	DownstreamKey("acme|POST /v1/orders/{id}/pay", "pay-1", "charge")
//	// "2c6a...-...": the same string on every call
func DownstreamKey(scope, key, purpose string) string {
	return uuid.NewSHA1(KeyNamespace, []byte(scope+"\x00"+key+"\x00"+purpose)).String()
}
