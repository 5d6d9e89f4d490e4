{{/* The image: repository and tag (the chart's appVersion unless set), or a digest. */}}
{{- define "nodesync.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/*
A container's extra flags (controller.extraArgs, agent.extraArgs) as YAML list items, after
refusing each flag the chart sets itself (the generated templates pass those as "reserved").
*/}}
{{- define "nodesync.extraArgs" -}}
{{- $value := .value -}}
{{- $reserved := .reserved -}}
{{- range .args -}}
{{- $flag := regexReplaceAll "=.*$" . "" -}}
{{- if has $flag $reserved -}}
{{- fail (printf "%s: %s is set by the chart (from values.yaml, or by the manifests the other objects rely on), so it cannot be an extra flag" $value $flag) -}}
{{- end -}}
{{- end -}}
{{- with .args -}}
{{ toYaml . }}
{{- end -}}
{{- end -}}
