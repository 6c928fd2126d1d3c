package sideeffect

import (
	"strings"

	"github.com/google/uuid"
)

// keyNamespaceURL names the UUID namespace of downstream keys.
const keyNamespaceURL = "https://github.com/oncekv/oncekv/downstream-key"

// keyNamespace is the UUIDv5 of keyNamespaceURL in the URL namespace.
var keyNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte(keyNamespaceURL))

// KeyNamespace returns the UUID namespace of downstream keys: the UUIDv5 of
// the URL "https://github.com/oncekv/oncekv/downstream-key" in the URL
// namespace. It is a function so that no caller can change it.
func KeyNamespace() uuid.UUID { return keyNamespace }

// DownstreamKey derives the key sent to an outside system for one side
// effect: the UUIDv5 (SHA-1, RFC 9562) of scope, key and purpose in
// KeyNamespace. It is deterministic, so every retry and every process
// restart sends the provider the same key, and it never repeats across
// scopes or purposes ("charge" and "refund" of one request get different
// keys).
//
// The three fields are joined by NUL bytes after escaping NUL and 0x01
// inside them (NUL as 0x01 0x01, 0x01 as 0x01 0x02), so the encoding is
// injective: ("a\x00b", "c") and ("a", "b\x00c") get different keys (issue
// 13, item 7). Fields without those bytes encode exactly as before the
// escaping existed, so the keys of intents already stored do not change.
//
//	DownstreamKey("acme|POST /v1/orders/{id}/pay", "pay-1", "charge")
//	// "2c6a...-...": the same string on every call
func DownstreamKey(scope, key, purpose string) string {
	var b strings.Builder
	b.Grow(len(scope) + len(key) + len(purpose) + 2)
	escapeField(&b, scope)
	b.WriteByte(0)
	escapeField(&b, key)
	b.WriteByte(0)
	escapeField(&b, purpose)
	return uuid.NewSHA1(keyNamespace, []byte(b.String())).String()
}

func escapeField(b *strings.Builder, s string) {
	if !strings.ContainsAny(s, "\x00\x01") {
		b.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case 0:
			b.WriteString("\x01\x01")
		case 1:
			b.WriteString("\x01\x02")
		default:
			b.WriteByte(s[i])
		}
	}
}
