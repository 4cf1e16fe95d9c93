package config

import (
	"errors"
	"fmt"

	"github.com/goccy/go-yaml"
)

// DecodeSettings decodes the announcer's settings block (Settings) into
// v, a pointer to the settings struct of a type registered outside this
// package, as strictly as Parse decodes the rest: an unknown field or a
// value of the wrong type is an error naming it. No block leaves v as it
// is.
func (a Announcer) DecodeSettings(v any) error {
	if a.Settings == nil {
		return nil
	}
	data, err := yaml.Marshal(a.Settings)
	if err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	if err := yaml.UnmarshalWithOptions(data, v, yaml.Strict()); err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) {
			// Its position is in the re-encoded block, not the file.
			return fmt.Errorf("settings: %s", ye.GetMessage())
		}
		return fmt.Errorf("settings: %w", err)
	}
	return nil
}
