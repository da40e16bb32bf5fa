package api

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestParamsJSON(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Params
	}{
		{`null`, nil},
		{`{}`, Params{}},
		{`{"a":"x","b":""}`, Params{"a": "x", "b": ""}},
		{`{"a":null}`, Params{"a": ""}},
		{`{"n":5,"f":1.50,"b":true,"s":"x"}`, Params{"n": "5", "f": "1.50", "b": "true", "s": "x"}},
		{`{"l":["a",2,false]}`, Params{"l": "a,2,false"}},
	} {
		var p Params
		if err := json.Unmarshal([]byte(c.in), &p); err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(p, c.want) {
			t.Errorf("%s: %#v, want %#v", c.in, p, c.want)
		}
	}
	for _, bad := range []string{`{"o":{"x":1}}`, `{"l":[[1]]}`, `[1]`, `"s"`} {
		var p Params
		if err := json.Unmarshal([]byte(bad), &p); err == nil {
			t.Errorf("%s: no error, got %#v", bad, p)
		}
	}
}
