// Package outlast makes LLM API requests outlast a provider's outage: it
// retries failed requests with waits long enough to matter, inside the
// caller's deadline, in the outermost layer only, and never after a byte of
// the response may have reached the caller.
//
// The pieces:
//   - [Policy] says how long to wait before each retry ([Policy.Waits]),
//     how much of the deadline to keep ([Policy.Reserve]), and what else
//     bounds the retries.
//   - [IsRetryable] and [ServerGone] classify failures; [RetryAfter] reads
//     a server's requested delay.
//   - [Transport] is an http.RoundTripper that applies a policy to every
//     request, holds a [Gate] around each attempt, and reports each attempt
//     to [Hooks]. [Do] applies a policy to any function.
//   - [WithPolicy] and [WithHooks] set the policy and hooks per request.
//
// Nothing is retried unless a policy is given, and a request that succeeds
// at once never reads the policy.
//
// # Only the outermost layer retries
//
// While a request that may retry is in flight, its context carries a mark,
// and every outlast layer that sees the mark ([Do], [Transport]) makes
// exactly one attempt. Two nested layers with k retries each then make k+1
// attempts, not (k+1)². Each attempt a Transport sends under a policy
// carries the header Outlast-Attempt: n, so an outlast gateway further on
// makes one attempt too.
//
// # Double billing
//
// A timed-out attempt may have been finished, and billed, by the provider
// without its response arriving. Retrying it can bill the request twice.
// This is more likely without a deadline, when waits run to the end of
// [Policy.Waits] whatever the caller's patience.
package outlast

// Version is outlast's version: the one that outlast version, the
// gateway's health endpoint, its page and its traces all report. It is
// kept in the source. A release's commit sets it to the release's number
// and is tagged with it (v0.1.0 for 0.1.0); the commits after it name the
// next release, with -dev.
var Version = "0.2.0-dev"
