package gateway

import (
	"errors"
	"net/url"
	"strings"
)

// resolvePath returns the request path escaped, as the request line gave
// it, with its dot-segments removed (RFC 3986 §5.2.4), whether they come
// raw or percent-encoded (%2e), and percent-decoded. The upstream is
// chosen by the result, and it is what is forwarded, so no segment can
// climb out of an upstream's base path.
//
// It refuses a path that would climb above the root, and one that holds
// an encoded slash (%2f) or a backslash, raw or encoded (%5c): servers
// split those into segments differently, and one that did after the
// gateway had resolved the path could still climb out of the base.
func resolvePath(escaped string) (string, error) {
	if escaped == "" {
		return "/", nil
	}
	if escaped[0] != '/' {
		return "", errors.New("outlast: the request's path does not start with /")
	}
	if !strings.ContainsAny(escaped, `%\`) && !strings.Contains(escaped, "/.") {
		return escaped, nil // nothing to decode, refuse or remove, as most paths
	}
	if lower := strings.ToLower(escaped); strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") || strings.Contains(escaped, `\`) {
		return "", errors.New("outlast: the request's path holds an encoded slash or a backslash, which servers split differently")
	}
	decoded, err := url.PathUnescape(escaped)
	if err != nil {
		return "", errors.New("outlast: the request's path is badly escaped")
	}
	var kept []string
	segs := strings.Split(decoded[1:], "/")
	for i, seg := range segs {
		last := i == len(segs)-1
		switch seg {
		case ".":
			if last {
				kept = append(kept, "") // "/a/." is "/a/"
			}
		case "..":
			if len(kept) == 0 {
				return "", errors.New("outlast: the request's path climbs above the root")
			}
			kept = kept[:len(kept)-1]
			if last {
				kept = append(kept, "") // "/a/b/.." is "/a/"
			}
		default:
			kept = append(kept, seg)
		}
	}
	return "/" + strings.Join(kept, "/"), nil
}
