package config

import (
	"reflect"
	"strings"
)

// Changed returns the paths (as in FieldError) of the fields whose values
// differ between a and b, descending into sections but comparing lists
// and maps whole. A reload uses it to tell what it can apply live from
// what needs a restart.
func Changed(a, b *Config) []string {
	var out []string
	changed(reflect.ValueOf(*a), reflect.ValueOf(*b), "", &out)
	return out
}

func changed(a, b reflect.Value, path string, out *[]string) {
	if a.Kind() != reflect.Struct {
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path)
		}
		return
	}
	t := a.Type()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		p := name
		if path != "" {
			p = path + "." + name
		}
		changed(a.Field(i), b.Field(i), p, out)
	}
}
