"""The PodSpec schema, generated from the kubernetes client's models; do not edit.

Regenerate with ``AUTOWRAP_UPDATE_PODSCHEMA=1 pytest tests/rules/test_pod_schema.py``
(see tests/support/podschema_snapshot.py). One model per line: ``Model field:type …``;
types are int, str, bool, float, object (anything), quantity, ``[T]`` (list) and
``{T}`` (map of T). NEWER holds ``Model.field version`` for fields added after 1.32.
"""

ROOT = "V1PodSpec"
BASELINE = "1.32"

MODELS = """
CoreV1ResourceClaim name:str request:str
V1AWSElasticBlockStoreVolumeSource fsType:str partition:int readOnly:bool volumeID:str
V1Affinity nodeAffinity:V1NodeAffinity podAffinity:V1PodAffinity podAntiAffinity:V1PodAntiAffinity
V1AppArmorProfile localhostProfile:str type:str
V1AzureDiskVolumeSource cachingMode:str diskName:str diskURI:str fsType:str kind:str readOnly:bool
V1AzureFileVolumeSource readOnly:bool secretName:str shareName:str
V1CSIVolumeSource driver:str fsType:str nodePublishSecretRef:V1LocalObjectReference readOnly:bool volumeAttributes:{str}
V1Capabilities add:[str] drop:[str]
V1CephFSVolumeSource monitors:[str] path:str readOnly:bool secretFile:str secretRef:V1LocalObjectReference user:str
V1CinderVolumeSource fsType:str readOnly:bool secretRef:V1LocalObjectReference volumeID:str
V1ClusterTrustBundleProjection labelSelector:V1LabelSelector name:str optional:bool path:str signerName:str user:int
V1ConfigMapEnvSource name:str optional:bool
V1ConfigMapKeySelector key:str name:str optional:bool
V1ConfigMapProjection items:[V1KeyToPath] name:str optional:bool
V1ConfigMapVolumeSource defaultMode:int defaultUser:int items:[V1KeyToPath] name:str optional:bool
V1Container args:[str] command:[str] env:[V1EnvVar] envFrom:[V1EnvFromSource] image:str imagePullPolicy:str lifecycle:V1Lifecycle livenessProbe:V1Probe name:str ports:[V1ContainerPort] readinessProbe:V1Probe resizePolicy:[V1ContainerResizePolicy] resources:V1ResourceRequirements restartPolicy:str restartPolicyRules:[V1ContainerRestartRule] securityContext:V1SecurityContext startupProbe:V1Probe stdin:bool stdinOnce:bool terminationMessagePath:str terminationMessagePolicy:str tty:bool volumeDevices:[V1VolumeDevice] volumeMounts:[V1VolumeMount] workingDir:str
V1ContainerPort containerPort:int hostIP:str hostPort:int name:str protocol:str
V1ContainerResizePolicy resourceName:str restartPolicy:str
V1ContainerRestartRule action:str exitCodes:V1ContainerRestartRuleOnExitCodes
V1ContainerRestartRuleOnExitCodes operator:str values:[int]
V1DownwardAPIProjection items:[V1DownwardAPIVolumeFile]
V1DownwardAPIVolumeFile fieldRef:V1ObjectFieldSelector mode:int path:str resourceFieldRef:V1ResourceFieldSelector user:int
V1DownwardAPIVolumeSource defaultMode:int defaultUser:int items:[V1DownwardAPIVolumeFile]
V1EmptyDirVolumeSource medium:str mode:int sizeLimit:quantity
V1EnvFromSource configMapRef:V1ConfigMapEnvSource prefix:str secretRef:V1SecretEnvSource
V1EnvVar name:str value:str valueFrom:V1EnvVarSource
V1EnvVarSource configMapKeyRef:V1ConfigMapKeySelector fieldRef:V1ObjectFieldSelector fileKeyRef:V1FileKeySelector resourceFieldRef:V1ResourceFieldSelector secretKeyRef:V1SecretKeySelector
V1EphemeralContainer args:[str] command:[str] env:[V1EnvVar] envFrom:[V1EnvFromSource] image:str imagePullPolicy:str lifecycle:V1Lifecycle livenessProbe:V1Probe name:str ports:[V1ContainerPort] readinessProbe:V1Probe resizePolicy:[V1ContainerResizePolicy] resources:V1ResourceRequirements restartPolicy:str restartPolicyRules:[V1ContainerRestartRule] securityContext:V1SecurityContext startupProbe:V1Probe stdin:bool stdinOnce:bool targetContainerName:str terminationMessagePath:str terminationMessagePolicy:str tty:bool volumeDevices:[V1VolumeDevice] volumeMounts:[V1VolumeMount] workingDir:str
V1EphemeralVolumeSource volumeClaimTemplate:V1PersistentVolumeClaimTemplate
V1EvictionResponder name:str priority:int
V1ExecAction command:[str]
V1FCVolumeSource fsType:str lun:int readOnly:bool targetWWNs:[str] wwids:[str]
V1FileKeySelector key:str optional:bool path:str volumeName:str
V1FlexVolumeSource driver:str fsType:str options:{str} readOnly:bool secretRef:V1LocalObjectReference
V1FlockerVolumeSource datasetName:str datasetUUID:str
V1GCEPersistentDiskVolumeSource fsType:str partition:int pdName:str readOnly:bool
V1GRPCAction mode:str port:int service:str
V1GitRepoVolumeSource directory:str repository:str revision:str
V1GlusterfsVolumeSource endpoints:str path:str readOnly:bool
V1HTTPGetAction host:str httpHeaders:[V1HTTPHeader] path:str port:object protocol:str scheme:str
V1HTTPHeader name:str value:str
V1HostAlias hostnames:[str] ip:str
V1HostPathVolumeSource path:str type:str
V1ISCSIVolumeSource chapAuthDiscovery:bool chapAuthSession:bool fsType:str initiatorName:str iqn:str iscsiInterface:str lun:int portals:[str] readOnly:bool secretRef:V1LocalObjectReference targetPortal:str
V1ImageVolumeSource pullPolicy:str reference:str
V1KeyToPath key:str mode:int path:str user:int
V1LabelSelector matchExpressions:[V1LabelSelectorRequirement] matchLabels:{str}
V1LabelSelectorRequirement key:str operator:str values:[str]
V1Lifecycle postStart:V1LifecycleHandler preStop:V1LifecycleHandler stopSignal:str
V1LifecycleHandler exec:V1ExecAction httpGet:V1HTTPGetAction sleep:V1SleepAction tcpSocket:V1TCPSocketAction
V1LocalObjectReference name:str
V1ManagedFieldsEntry apiVersion:str fieldsType:str fieldsV1:object manager:str operation:str subresource:str time:str
V1NFSVolumeSource path:str readOnly:bool server:str
V1NodeAffinity preferredDuringSchedulingIgnoredDuringExecution:[V1PreferredSchedulingTerm] requiredDuringSchedulingIgnoredDuringExecution:V1NodeSelector
V1NodeSelector nodeSelectorTerms:[V1NodeSelectorTerm]
V1NodeSelectorRequirement key:str operator:str values:[str]
V1NodeSelectorTerm matchExpressions:[V1NodeSelectorRequirement] matchFields:[V1NodeSelectorRequirement]
V1ObjectFieldSelector apiVersion:str fieldPath:str
V1ObjectMeta annotations:{str} creationTimestamp:str deletionGracePeriodSeconds:int deletionTimestamp:str finalizers:[str] generateName:str generation:int labels:{str} managedFields:[V1ManagedFieldsEntry] name:str namespace:str ownerReferences:[V1OwnerReference] resourceVersion:str selfLink:str uid:str
V1OwnerReference apiVersion:str blockOwnerDeletion:bool controller:bool kind:str name:str uid:str
V1PersistentVolumeClaimSpec accessModes:[str] dataSource:V1TypedLocalObjectReference dataSourceRef:V1TypedObjectReference resources:V1VolumeResourceRequirements selector:V1LabelSelector storageClassName:str volumeAttributesClassName:str volumeMode:str volumeName:str
V1PersistentVolumeClaimTemplate metadata:V1ObjectMeta spec:V1PersistentVolumeClaimSpec
V1PersistentVolumeClaimVolumeSource claimName:str readOnly:bool
V1PhotonPersistentDiskVolumeSource fsType:str pdID:str
V1PodAffinity preferredDuringSchedulingIgnoredDuringExecution:[V1WeightedPodAffinityTerm] requiredDuringSchedulingIgnoredDuringExecution:[V1PodAffinityTerm]
V1PodAffinityTerm labelSelector:V1LabelSelector matchLabelKeys:[str] mismatchLabelKeys:[str] namespaceSelector:V1LabelSelector namespaces:[str] topologyKey:str
V1PodAntiAffinity preferredDuringSchedulingIgnoredDuringExecution:[V1WeightedPodAffinityTerm] requiredDuringSchedulingIgnoredDuringExecution:[V1PodAffinityTerm]
V1PodCertificateProjection certificateChainPath:str credentialBundlePath:str keyPath:str keyType:str maxExpirationSeconds:int signerName:str user:int userAnnotations:{str}
V1PodDNSConfig nameservers:[str] options:[V1PodDNSConfigOption] searches:[str]
V1PodDNSConfigOption name:str value:str
V1PodOS name:str
V1PodReadinessGate conditionType:str
V1PodResourceClaim name:str resourceClaimName:str resourceClaimTemplateName:str
V1PodSchedulingGate name:str
V1PodSchedulingGroup podGroupName:str
V1PodSecurityContext appArmorProfile:V1AppArmorProfile fsGroup:int fsGroupChangePolicy:str runAsGroup:int runAsNonRoot:bool runAsUser:int seLinuxChangePolicy:str seLinuxOptions:V1SELinuxOptions seccompProfile:V1SeccompProfile supplementalGroups:[int] supplementalGroupsPolicy:str sysctls:[V1Sysctl] windowsOptions:V1WindowsSecurityContextOptions
V1PodSpec activeDeadlineSeconds:int affinity:V1Affinity automountServiceAccountToken:bool containers:[V1Container] dnsConfig:V1PodDNSConfig dnsPolicy:str enableServiceLinks:bool ephemeralContainers:[V1EphemeralContainer] evictionResponders:[V1EvictionResponder] hostAliases:[V1HostAlias] hostIPC:bool hostNetwork:bool hostPID:bool hostUsers:bool hostname:str hostnameOverride:str imagePullSecrets:[V1LocalObjectReference] initContainers:[V1Container] nodeName:str nodeSelector:{str} os:V1PodOS overhead:{quantity} preemptionPolicy:str priority:int priorityClassName:str readinessGates:[V1PodReadinessGate] resourceClaims:[V1PodResourceClaim] resources:V1ResourceRequirements restartPolicy:str runtimeClassName:str schedulerName:str schedulingGates:[V1PodSchedulingGate] schedulingGroup:V1PodSchedulingGroup securityContext:V1PodSecurityContext serviceAccount:str serviceAccountName:str setHostnameAsFQDN:bool shareProcessNamespace:bool subdomain:str terminationGracePeriodSeconds:int tolerations:[V1Toleration] topologySpreadConstraints:[V1TopologySpreadConstraint] volumes:[V1Volume]
V1PortworxVolumeSource fsType:str readOnly:bool volumeID:str
V1PreferredSchedulingTerm preference:V1NodeSelectorTerm weight:int
V1Probe exec:V1ExecAction failureThreshold:int grpc:V1GRPCAction httpGet:V1HTTPGetAction initialDelaySeconds:int periodSeconds:int successThreshold:int tcpSocket:V1TCPSocketAction terminationGracePeriodSeconds:int timeoutSeconds:int
V1ProjectedVolumeSource defaultMode:int defaultUser:int sources:[V1VolumeProjection]
V1QuobyteVolumeSource group:str readOnly:bool registry:str tenant:str user:str volume:str
V1RBDVolumeSource fsType:str image:str keyring:str monitors:[str] pool:str readOnly:bool secretRef:V1LocalObjectReference user:str
V1ResourceFieldSelector containerName:str divisor:quantity resource:str
V1ResourceRequirements claims:[CoreV1ResourceClaim] limits:{quantity} requests:{quantity}
V1SELinuxOptions level:str role:str type:str user:str
V1ScaleIOVolumeSource fsType:str gateway:str protectionDomain:str readOnly:bool secretRef:V1LocalObjectReference sslEnabled:bool storageMode:str storagePool:str system:str volumeName:str
V1SeccompProfile localhostProfile:str type:str
V1SecretEnvSource name:str optional:bool
V1SecretKeySelector key:str name:str optional:bool
V1SecretProjection items:[V1KeyToPath] name:str optional:bool
V1SecretVolumeSource defaultMode:int defaultUser:int items:[V1KeyToPath] optional:bool secretName:str
V1SecurityContext allowPrivilegeEscalation:bool appArmorProfile:V1AppArmorProfile capabilities:V1Capabilities privileged:bool procMount:str readOnlyRootFilesystem:bool runAsGroup:int runAsNonRoot:bool runAsUser:int seLinuxOptions:V1SELinuxOptions seccompProfile:V1SeccompProfile windowsOptions:V1WindowsSecurityContextOptions
V1ServiceAccountTokenProjection audience:str expirationSeconds:int path:str user:int
V1SleepAction seconds:int
V1StorageOSVolumeSource fsType:str readOnly:bool secretRef:V1LocalObjectReference volumeName:str volumeNamespace:str
V1Sysctl name:str value:str
V1TCPSocketAction host:str port:object
V1Toleration effect:str key:str operator:str tolerationSeconds:int value:str
V1TopologySpreadConstraint labelSelector:V1LabelSelector matchLabelKeys:[str] maxSkew:int minDomains:int nodeAffinityPolicy:str nodeTaintsPolicy:str topologyKey:str whenUnsatisfiable:str
V1TypedLocalObjectReference apiGroup:str kind:str name:str
V1TypedObjectReference apiGroup:str kind:str name:str namespace:str
V1Volume awsElasticBlockStore:V1AWSElasticBlockStoreVolumeSource azureDisk:V1AzureDiskVolumeSource azureFile:V1AzureFileVolumeSource cephfs:V1CephFSVolumeSource cinder:V1CinderVolumeSource configMap:V1ConfigMapVolumeSource csi:V1CSIVolumeSource downwardAPI:V1DownwardAPIVolumeSource emptyDir:V1EmptyDirVolumeSource ephemeral:V1EphemeralVolumeSource fc:V1FCVolumeSource flexVolume:V1FlexVolumeSource flocker:V1FlockerVolumeSource gcePersistentDisk:V1GCEPersistentDiskVolumeSource gitRepo:V1GitRepoVolumeSource glusterfs:V1GlusterfsVolumeSource hostPath:V1HostPathVolumeSource image:V1ImageVolumeSource iscsi:V1ISCSIVolumeSource name:str nfs:V1NFSVolumeSource persistentVolumeClaim:V1PersistentVolumeClaimVolumeSource photonPersistentDisk:V1PhotonPersistentDiskVolumeSource portworxVolume:V1PortworxVolumeSource projected:V1ProjectedVolumeSource quobyte:V1QuobyteVolumeSource rbd:V1RBDVolumeSource scaleIO:V1ScaleIOVolumeSource secret:V1SecretVolumeSource storageos:V1StorageOSVolumeSource vsphereVolume:V1VsphereVirtualDiskVolumeSource
V1VolumeDevice devicePath:str name:str
V1VolumeMount bindMountOptions:[str] mountPath:str mountPropagation:str name:str readOnly:bool recursiveReadOnly:str subPath:str subPathExpr:str
V1VolumeProjection clusterTrustBundle:V1ClusterTrustBundleProjection configMap:V1ConfigMapProjection downwardAPI:V1DownwardAPIProjection podCertificate:V1PodCertificateProjection secret:V1SecretProjection serviceAccountToken:V1ServiceAccountTokenProjection
V1VolumeResourceRequirements limits:{quantity} requests:{quantity}
V1VsphereVirtualDiskVolumeSource fsType:str storagePolicyID:str storagePolicyName:str volumePath:str
V1WeightedPodAffinityTerm podAffinityTerm:V1PodAffinityTerm weight:int
V1WindowsSecurityContextOptions gmsaCredentialSpec:str gmsaCredentialSpecName:str hostProcess:bool runAsUserName:str
"""

NEWER = """
V1ClusterTrustBundleProjection.user 1.37
V1ConfigMapVolumeSource.defaultUser 1.37
V1Container.restartPolicyRules 1.34
V1DownwardAPIVolumeFile.user 1.37
V1DownwardAPIVolumeSource.defaultUser 1.37
V1EmptyDirVolumeSource.mode 1.37
V1EnvVarSource.fileKeyRef 1.34
V1EphemeralContainer.restartPolicyRules 1.34
V1GRPCAction.mode 1.37
V1HTTPGetAction.protocol 1.37
V1KeyToPath.user 1.37
V1Lifecycle.stopSignal 1.33
V1PodSpec.evictionResponders 1.37
V1PodSpec.hostnameOverride 1.34
V1PodSpec.schedulingGroup 1.36
V1PodSpec.workloadRef 1.35
V1ProjectedVolumeSource.defaultUser 1.37
V1SecretVolumeSource.defaultUser 1.37
V1ServiceAccountTokenProjection.user 1.37
V1VolumeMount.bindMountOptions 1.37
V1VolumeProjection.podCertificate 1.34
"""
