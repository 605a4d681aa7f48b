{{- /*
The ConfigMap's name as kustomize writes it: the generator's name, "-", and the first ten
hex digits of the SHA-256 of {"data": ..., "kind": "ConfigMap", "name": ""} as Go's
encoding/json writes it (sorted keys, <, > and & escaped: Helm's toJson is that encoder),
with 0, 1, 3, a, e mapped to g, h, k, m, t (kustomize's api/hasher). The name is empty
there because kustomize looks "metadata/name" up as one field name, which no ConfigMap
has. tests/deploy/test_helm.py renders both with other configurations and compares.
*/}}
{{- define "gang-scheduler.configMapName" -}}
{{- $data := dict "config.yaml" .Values.config -}}
{{- $encoded := dict "data" $data "kind" "ConfigMap" "name" "" | toJson -}}
{{- $hash := $encoded | sha256sum | trunc 10 -}}
{{- $hash = $hash | replace "0" "g" | replace "1" "h" | replace "3" "k" -}}
{{- $hash = $hash | replace "a" "m" | replace "e" "t" -}}
gang-scheduler-config-{{ $hash }}
{{- end }}

{{- /*
The configuration must agree with what the chart fixes around it: the Lease is in the
release namespace (the Role grants it there only), so are the signing-key Secrets, and the scheduler listens on the port
its probes, containerPort and Service use.
*/}}
{{- define "gang-scheduler.checkConfig" -}}
{{- $config := .Values.config | fromYaml -}}
{{- if hasKey $config "Error" -}}
{{- fail (printf "values: config is not a YAML mapping: %s" (get $config "Error")) -}}
{{- end -}}
{{- $lease := dig "leaderElection" "leaseNamespace" "kube-system" $config -}}
{{- if ne $lease .Release.Namespace -}}
{{- $why := "the Role grants the Lease in the release namespace only" -}}
{{- fail (printf "values: config sets leaderElection.leaseNamespace %s, but the release namespace is %s: %s; set leaderElection.leaseNamespace: %s in config" $lease .Release.Namespace $why .Release.Namespace) -}}
{{- end -}}
{{- $keys := dig "assignmentSigning" "namespace" "kube-system" $config -}}
{{- if ne $keys .Release.Namespace -}}
{{- fail (printf "values: config sets assignmentSigning.namespace %s, but the release namespace is %s: the Roles grant the signing-key Secrets in the release namespace only; set assignmentSigning.namespace: %s in config" $keys .Release.Namespace .Release.Namespace) -}}
{{- end -}}
{{- $port := dig "http" "port" 10269 $config | int -}}
{{- if ne $port 10269 -}}
{{- fail (printf "values: config sets http.port %d; the chart's probes, containerPort and Service use 10269" $port) -}}
{{- end -}}
{{- end }}

{{- /*
The signing-key Secrets' names, as the scheduler reads them from its configuration
(assignmentSigning.secretName and nodeAgentSecretName; empty or absent: the defaults,
which are also the names the Roles grant when the scheduler keeps its key in-process).
*/}}
{{- define "gang-scheduler.assignmentKeySecret" -}}
{{- dig "assignmentSigning" "secretName" "" (.Values.config | fromYaml) | default "gang-scheduler-assignment-key" -}}
{{- end }}

{{- define "gang-scheduler.nodeAgentKeySecret" -}}
{{- dig "assignmentSigning" "nodeAgentSecretName" "" (.Values.config | fromYaml) | default "gang-scheduler-node-agent-key" -}}
{{- end }}
