package outlast

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/outlast-llm/outlast/internal/sse"
)

// ErrErrorEvent is wrapped by the *StatusError of an attempt whose event
// stream failed before its answer began: a 200 whose events up to the
// first that carries the answer end in an error (Anthropic's
// overloaded_error after its message_start, the Responses API's error
// after response.created, an OpenAI error chunk after the role chunk).
// Nothing of the answer had reached the caller, so the policy judges it
// like the status that the error's type stands for.
var ErrErrorEvent = errors.New("outlast: the stream failed before its answer began")

// streamFailure returns the failure of resp's event stream, if it failed
// before its answer began: a Transport returns such a response, its body
// intact, as it returns a failed status, once it retries no more.
func streamFailure(resp *http.Response) *StatusError { return bodyFailure(resp.Body) }

// bodyFailure returns the failure a body kept, through the bodies that
// wrap it, or nil.
func bodyFailure(b io.ReadCloser) *StatusError {
	if f, ok := b.(interface{ failure() *StatusError }); ok {
		return f.failure()
	}
	return nil
}

// errorEvent returns the failure of an attempt whose stream sent ev, an
// error event, before its answer began: a *StatusError with the status
// the same error has as a response.
func errorEvent(ev *sse.Event, h http.Header) *StatusError {
	typ, status := sse.ErrorOf(ev)
	return &StatusError{
		StatusCode: status,
		Header:     h,
		Err:        fmt.Errorf("%w: %s", ErrErrorEvent, typ),
	}
}
