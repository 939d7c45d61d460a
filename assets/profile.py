"""dataset_profile: metrics and schema validation (issue 8).

Not yet an asset. When the library's profile lands (mergeable metrics per shard, a
metrics sidecar bound by digest), it goes here as a thin call:

    @dg.asset(group_name=GROUP, deps=["data_manifest"])
    def dataset_profile(context, store: ObjectStore, dataset: DatasetSpec) -> dg.MaterializeResult:
        # profile = trainvault.profile.profile_publication(vault, manifest_uri, ...)
        # sidecar = write it next to the manifest; record metrics and schema as metadata
        ...

and `approved_dataset` binds the sidecar through `ApprovalRequest.sidecars`.
"""
