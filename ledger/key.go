package ledger

import (
	"fmt"
	"strings"
)

// MaxKeyLen is the longest idempotency key accepted, in bytes.
const MaxKeyLen = 255

// MaxScopeLen is the longest scope accepted, in bytes.
const MaxScopeLen = 1024

// ValidateKey checks that key is 1 to MaxKeyLen bytes of visible ASCII
// (0x21 to 0x7E). It returns an error wrapping ErrInvalidKey otherwise.
func ValidateKey(key string) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: byte 0x%02x at offset %d is not visible ASCII", ErrInvalidKey, c, i)
		}
	}
	return nil
}

// ValidateScope checks that scope is 1 to MaxScopeLen bytes without NUL,
// and that its tenant (TenantOf) is not empty: a scope may not begin with
// '|'. Usage and quotas are kept per tenant.
func ValidateScope(scope string) error {
	switch {
	case len(scope) == 0:
		return fmt.Errorf("%w: empty", ErrInvalidScope)
	case scope[0] == '|':
		return fmt.Errorf("%w: empty tenant: the scope begins with '|', the separator after the tenant (see Scope)", ErrInvalidScope)
	case len(scope) > MaxScopeLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidScope, len(scope), MaxScopeLen)
	case strings.IndexByte(scope, 0) >= 0:
		return fmt.Errorf("%w: contains a NUL byte", ErrInvalidScope)
	}
	return nil
}

// Scope builds the scope of an HTTP endpoint: the tenant (from the server's
// own authentication, never from a client header), the method and the route
// pattern. The tenant may not contain '|' or control characters, so two
// tenants can never produce the same scope.
//
//	ledger.Scope("acme", "POST", "/v1/orders") == "acme|POST /v1/orders"
func Scope(tenant, method, route string) (string, error) {
	if tenant == "" {
		return "", fmt.Errorf("%w: empty tenant", ErrInvalidScope)
	}
	for i := 0; i < len(tenant); i++ {
		switch c := tenant[i]; {
		case c == '|':
			return "", fmt.Errorf("%w: tenant %q contains '|', the scope separator: two tenants could then share a scope", ErrInvalidScope, clip(tenant))
		case c < 0x20 || c == 0x7f:
			return "", fmt.Errorf("%w: tenant contains the control byte 0x%02x", ErrInvalidScope, c)
		}
	}
	s := tenant + "|" + method + " " + route
	return s, ValidateScope(s)
}

// clip bounds user input quoted in an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
