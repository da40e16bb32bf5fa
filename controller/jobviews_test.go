package controller

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// jsonFields maps a struct type's JSON names to its fields' types.
func jsonFields(typ reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = f.Type
	}
	return out
}

// The partial views that decode a stored job without its results (the
// index, the dashboard's list, a long poll's look at the status, the
// index's operations) and the API's job head read api.Job's JSON: each of
// their fields must be a field of api.Job under the same name with the same
// type, so a field renamed or retyped in api.Job cannot leave a view
// reading nothing. The API head's derived fields (step names, node count)
// are the only exceptions.
func TestJobViewsReadJobFields(t *testing.T) {
	job := jsonFields(reflect.TypeFor[api.Job]())
	derived := map[string]bool{"api.JobHead.tasks": true, "api.JobHead.nodes": true}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[indexFields](), reflect.TypeFor[indexTasks](), reflect.TypeFor[storedJobHead](),
		reflect.TypeFor[jobHeadFields](), reflect.TypeFor[api.JobHead](),
	} {
		for name, ft := range jsonFields(typ) {
			if derived[typ.String()+"."+name] {
				continue
			}
			jt, ok := job[name]
			switch {
			case !ok:
				t.Errorf("%s reads %q, which api.Job does not have", typ, name)
			case jt != ft:
				t.Errorf("%s reads %q as %s, api.Job holds %s", typ, name, ft, jt)
			}
		}
	}
}
