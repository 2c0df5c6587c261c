package cli

import (
	"os"
	"strings"
	"testing"
)

// The pool example's keys, from the environment as a user's would be.
func init() {
	os.Setenv("OPENAI_KEY_A", "sk-example-key-a")
	os.Setenv("OPENAI_KEY_B", "sk-example-key-b")
	os.Setenv("AZURE_EAST_KEY", "sk-example-azure-east")
}

// docs/gateway.md's pool example, loaded: three members with their own
// credentials, one renaming the model with a weight of 2, each with an
// admission controller of its own and the pool with none; the gateway
// takes it.
func TestPoolExampleConfig(t *testing.T) {
	t.Parallel()
	const file = "testdata/pool.example.yaml"
	c := loadServe(t, "--config", file)
	ups := c.Gateway.Upstreams
	if len(ups) != 1 || ups[0].Name != "gpt" || len(ups[0].Members) != 3 || ups[0].URL != nil || ups[0].Admission != nil {
		t.Fatalf("upstreams %+v, want the pool gpt of 3 members, with no url or admission of its own", ups)
	}
	for i, want := range []string{"key-a", "key-b", "azure-east"} {
		m := ups[0].Members[i]
		if m.Name != want || m.Auth == nil || m.Admission == nil || m.URL == nil {
			t.Errorf("member %d: %+v, want %s with a credential, a url and an admission", i, m, want)
		}
	}
	east := ups[0].Members[2]
	if east.Weight != 2 || east.Models["gpt-4o"] != "gpt-4o-east" || east.Auth.Header() != "Api-Key" {
		t.Errorf("azure-east: weight %d, models %v, auth %v", east.Weight, east.Models, east.Auth)
	}
	if ups[0].Members[0].Admission == ups[0].Members[1].Admission {
		t.Error("two members share an admission controller")
	}
	if err := setupServe([]string{"--config", file}); err != nil {
		t.Fatalf("the gateway refuses the example: %v", err)
	}
	example, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(gatewayDoc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```yaml\n"+string(example)+"```") {
		t.Errorf("docs/gateway.md has no yaml block that is %s", file)
	}
}

// A pool's mistakes are named with their line and what to write instead.
func TestPoolConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, yaml, want string }{
		{"no name", "upstreams:\n  - members:\n      - url: http://a.test\n", "a pool needs a name"},
		{"url and members", "upstreams:\n  - name: p\n    url: http://x.test\n    members:\n      - url: http://a.test\n", "upstreams[0].url: a pool has members instead"},
		{"no members", "upstreams:\n  - name: p\n    members: []\n", "want a list of members"},
		{"member without url", "upstreams:\n  - name: p\n    members:\n      - name: a\n", "members[0].url: missing"},
		{"unknown member key", "upstreams:\n  - name: p\n    members:\n      - url: http://a.test\n        wieght: 2\n", `unknown key "wieght" (want one of url, name, auth`},
		{"pool key in a member", "upstreams:\n  - name: p\n    members:\n      - url: http://a.test\n        waits: [1s]\n", "it is a key of the pool"},
		{"bad weight", "upstreams:\n  - name: p\n    members:\n      - url: http://a.test\n        weight: 0\n", `weight "0": want a whole number, 1 or more`},
		{"bad member url", "upstreams:\n  - name: p\n    members:\n      - url: ftp://a.test\n", "members[0].url"},
		{"member twice", "upstreams:\n  - name: p\n    members:\n      - url: http://a.test\n      - url: http://a.test\n", `member name "a.test" is used twice`},
		{"key twice", "upstreams:\n  - name: p\n    members:\n      - url: http://a.test\n        url: http://b.test\n", `key "url" is given twice`},
	} {
		err := setupServe([]string{"--config", writeConfig(t, c.yaml)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one that says %q", c.name, err, c.want)
		}
	}
}

// A member with a key of its own sends it in the pool's auth_header, as
// a member of the same API would, unless it names its own.
func TestPoolMemberTakesThePoolsAuthHeader(t *testing.T) {
	t.Parallel()
	cfg := "upstreams:\n  - name: claude\n    auth: env:OPENAI_KEY_A\n    auth_header: x-api-key\n    members:\n" +
		"      - url: http://a.test\n        auth: env:OPENAI_KEY_B\n" +
		"      - url: http://b.test\n        auth: env:OPENAI_KEY_B\n        auth_header: api-key\n" +
		"      - url: http://c.test\n"
	ms := loadServe(t, "--config", writeConfig(t, cfg)).Gateway.Upstreams[0].Members
	for i, want := range []string{"X-Api-Key", "Api-Key", ""} {
		got := ""
		if ms[i].Auth != nil {
			got = ms[i].Auth.Header()
		}
		if got != want {
			t.Errorf("member %d's credential goes in %q, want %q", i, got, want)
		}
	}
}
