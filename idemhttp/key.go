package idemhttp

import (
	"fmt"
	"strings"

	"github.com/oncekv/oncekv/ledger"
)

// ParseKey reads the value of an Idempotency-Key header. The header is a
// Structured Field string (RFC 8941), so the quoted form "abc" is accepted and
// unquoted; a bare token is accepted as is. The result is validated with
// ledger.ValidateKey.
func ParseKey(header string) (string, error) {
	v := strings.TrimSpace(header)
	if len(v) > 0 && v[0] == '"' {
		k, err := unquoteSFString(v)
		if err != nil {
			return "", err
		}
		v = k
	}
	if err := ledger.ValidateKey(v); err != nil {
		return "", err
	}
	return v, nil
}

// unquoteSFString parses an RFC 8941 sf-string: DQUOTE *chr DQUOTE where chr
// is printable ASCII other than '"' and '\', or an escaped '"' or '\'.
func unquoteSFString(s string) (string, error) {
	if len(s) > 2*ledger.MaxKeyLen+2 {
		return "", fmt.Errorf("%w: quoted value of %d bytes is too long", ledger.ErrInvalidKey, len(s))
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i >= len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", fmt.Errorf("%w: bad escape in quoted string", ledger.ErrInvalidKey)
			}
			b.WriteByte(s[i])
		case c == '"':
			if i != len(s)-1 {
				return "", fmt.Errorf("%w: text after the closing quote", ledger.ErrInvalidKey)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%w: byte 0x%02x in quoted string", ledger.ErrInvalidKey, c)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("%w: missing closing quote", ledger.ErrInvalidKey)
}
