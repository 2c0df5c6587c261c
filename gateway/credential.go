package gateway

import (
	"net/http"
	"strings"

	"github.com/outlast-llm/outlast/internal/redact"
)

// A Credential is a secret the gateway holds for an upstream, and the
// header it goes in. Its String and GoString name the header only, so
// that printing an Upstream never shows the secret.
type Credential struct {
	header string
	secret string // as given
	value  string // as sent: secret, with "Bearer " for Authorization
}

// NewCredential returns the credential secret, sent in header: for
// Authorization, as "Bearer " and secret unless secret already has a
// scheme; for any other header (x-api-key for Anthropic, api-key for
// Azure OpenAI), as it is.
func NewCredential(header, secret string) *Credential {
	c := &Credential{header: http.CanonicalHeaderKey(header), secret: secret, value: secret}
	if c.header == "Authorization" && !strings.Contains(secret, " ") {
		c.value = "Bearer " + secret
	}
	return c
}

// WithHeader returns the credential, sent in header instead.
func (c *Credential) WithHeader(header string) *Credential {
	return NewCredential(header, c.secret)
}

// Header returns the header the credential is sent in.
func (c *Credential) Header() string { return c.header }

// String names the credential without showing it.
func (c *Credential) String() string { return "credential in " + c.header }

// GoString is String, for %#v.
func (c *Credential) GoString() string { return c.String() }

// apply puts the credential in h, in place of the caller's: every header
// that carries credentials, as redact's one list has them, goes, so that
// a caller's key for another provider (X-Goog-Api-Key beside the held
// Authorization, say) never reaches this upstream.
func (c *Credential) apply(h http.Header) {
	for k := range h {
		if redact.IsCredential(k) {
			delete(h, k) // in any case: a hand-made request's keys may not be canonical
		}
	}
	h.Set(c.header, c.value)
}
