package cli

import (
	"bytes"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/outlast-llm/outlast/gateway"
)

// configSeeds are config files for the config fuzzers: the YAML forms a
// person might type, by mistake or not, and secrets to keep out of errors.
var configSeeds = []string{
	"",
	"# only a comment\n",
	"upstreams:\n  - url: http://127.0.0.1:8080\n",
	"listen: :9000\nupstreams:\n  - {url: 'https://api.openai.com', prefix: /openai, waits: [1s, 2s], reserve: 0}\n  - url: http://h\n    prefix: /llama\n    slots: 2\n",
	"upstreams:\n  - url: http://x\n    waits: [[1s]]\n",
	"upstreams: &a\n  - url: http://x\n    name: *a\n",
	"upstreams:\n  - <<: {url: http://x}\n",
	"? [a, b]\n: 1\n",
	"\"a\\nb\": 1\n",
	"upstreams:\n  - url: http://x\n    prefix: \"a\\nb\"\n",
	"listen: \"a\\nb:99999\"\nupstreams:\n  - url: http://x\n",
	"token: s3cret-token-1\ngrace: -1s\nupstreams:\n  - url: http://x\n",
	"token: \"s3cret token\"\nupstreams:\n  - url: http://x\n",
	"listen: 0.0.0.0:8700\ntoken: s3cret-token-2\nupstreams:\n  - url: http://x\n    slots: -1\n",
	"upstreams:\n  - url: http://x\n    url: http://y\n",
	"journal: \"postgres://u:p@h/db?sslmode=\\n\"\nupstreams:\n  - url: http://x\n",
	"journal: postgres://u:hunter22@h:99999999/db\nupstreams:\n  - url: http://x\n",
	"journal: postgres://h/db?password=hunter22&sslmode=bad\nupstreams:\n  - url: http://x\n",
	"journal: postgres://h/db?target_session_attrs=%0A\nupstreams:\n  - url: http://x\n",
	"upstreams:\n  - url: https://user:hunter22@api.example.com/v1\n",
	"upstreams:\n  - url: \"http://h\\u0000\"\n",
	"a: 1\n---\nb: 2\n",
	"upstreams:\n\t- url: http://x\n",
	"!!binary aGVsbG8=\n",
	"upstreams: [{url: http://x, slots: 99999999999999999999, max_body: 1}]\n",
}

// addConfigSeeds adds configSeeds and the example config to f's corpus.
func addConfigSeeds(f *testing.F) {
	for _, s := range configSeeds {
		f.Add([]byte(s))
	}
	example, err := os.ReadFile(exampleConfig)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
}

// loadConfig writes data to path and loads it as serve's --config file,
// then hands what loads to gateway.New, as serve does before it listens.
func loadConfig(t *testing.T, path string, data []byte) error {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, done, err := serveConfigFrom([]string{"--config", path}, io.Discard)
	if done || err != nil {
		return err
	}
	for _, u := range cfg.Gateway.Upstreams {
		if u.URL == nil || (u.URL.Scheme != "http" && u.URL.Scheme != "https") || u.URL.Host == "" ||
			u.Name == "" || !strings.HasPrefix(u.Prefix, "/") || u.Policy.Validate() != nil {
			t.Fatalf("config %q loaded an upstream that serve cannot use: %+v", data, u)
		}
	}
	if len(cfg.Gateway.Upstreams) == 0 {
		t.Fatalf("config %q loaded with no upstream", data)
	}
	if _, err := gateway.New(cfg.Gateway); err != nil {
		return &usageError{err}
	}
	return nil
}

// FuzzServeConfig feeds any bytes to outlast serve as its config file.
// It must never panic; an error must be a usage error (exit 2) that says
// it is serve's, and shows no secret of the file; and what loads must be
// a gateway that serve can start. FuzzServeConfigOneLine checks that
// errors are one line.
func FuzzServeConfig(f *testing.F) {
	addConfigSeeds(f)
	// One file for all the inputs: a fuzz worker calls the function
	// sequentially, and a directory per input would be most of the time.
	path := filepath.Join(f.TempDir(), "config.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		err := loadConfig(t, path, data)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrUsage) || !strings.HasPrefix(err.Error(), "serve: ") {
			t.Fatalf("config %q: got %q, want a usage error that starts with \"serve: \"", data, err)
		}
		// The token and the passwords in URLs are secret: an error never
		// shows one (unless the file holds the same text elsewhere too).
		for _, secret := range secrets(data) {
			if len(secret) >= 6 && bytes.Count(data, []byte(secret)) == 1 && strings.Contains(err.Error(), secret) {
				t.Fatalf("config %q: got %q, which shows the secret %q", data, err, secret)
			}
		}
	})
}

// secrets returns the config file's secrets: the value of its token key,
// and the password of any URL in it.
func secrets(data []byte) []string {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return nil
	}
	var out []string
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		for i, c := range n.Content {
			if n.Kind == yaml.MappingNode && i%2 == 1 && n.Content[i-1].Value == "token" && c.Kind == yaml.ScalarNode {
				out = append(out, c.Value)
			}
			if u, err := url.Parse(c.Value); c.Kind == yaml.ScalarNode && err == nil {
				if p, ok := u.User.Password(); ok {
					out = append(out, p)
				}
			}
			walk(c)
		}
	}
	walk(&doc)
	return out
}

// FuzzServeConfigOneLine checks that whatever the config file holds, an
// error about it is one line, as main prints it (usageError's promise).
func FuzzServeConfigOneLine(f *testing.F) {
	addConfigSeeds(f)
	path := filepath.Join(f.TempDir(), "config.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := loadConfig(t, path, data); err != nil && strings.ContainsAny(err.Error(), "\r\n") {
			t.Fatalf("config %q: got %q, want one line", data, err)
		}
	})
}
