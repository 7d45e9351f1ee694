"""The EC2 nodes' network, through Ray's own launcher code over moto's EC2 and CloudFormation:
every node in the security group of infra/aws/security-groups.yaml (SSH from one CIDR, every port
between the nodes, nothing from the world), and why the launcher's own group is not used.
"""

from __future__ import annotations

import re

import yaml

from tests.infra.test_hardening import CLUSTER_YAML, SECURITY_GROUPS

SSH_CIDR = "203.0.113.7/32"


def _ingress(ec2, group_id: str) -> list[dict]:
    (group,) = ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"]
    return group["IpPermissions"]


def _opens_port_to(rules: list[dict], port: int) -> set[str]:
    """The CIDRs (IPv4 and IPv6) that ``rules`` let reach ``port``."""
    found = set()
    for rule in rules:
        everything = rule["IpProtocol"] == "-1"
        if everything or rule.get("FromPort", 0) <= port <= rule.get("ToPort", 65535):
            found |= {r["CidrIp"] for r in rule.get("IpRanges", [])}
            found |= {r["CidrIpv6"] for r in rule.get("Ipv6Ranges", [])}
    return found


def _configure_network(config: dict) -> dict:
    """What `ray up` does to the network part of a prepared config (subnets, security groups)."""
    from ray.autoscaler._private.aws import config as aws_config
    from ray.autoscaler._private.aws.utils import client_cache, resource_cache

    resource_cache.cache_clear()  # boto3 resources of an earlier mock are not this one's
    client_cache.cache_clear()
    return aws_config._configure_security_group(aws_config._configure_subnet(config))


def test_ec2_nodes_get_the_shipped_security_group_and_no_ssh_from_the_world(monkeypatch):
    import boto3
    from moto import mock_aws
    from ray.autoscaler._private.util import prepare_config, validate_config

    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    raw = yaml.safe_load(CLUSTER_YAML.read_text())
    region = raw["provider"]["region"]
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=region)
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        for index, zone in enumerate(raw["provider"]["availability_zone"].split(",")):
            subnet = ec2.create_subnet(
                VpcId=vpc, CidrBlock=f"10.0.{index}.0/24", AvailabilityZone=zone
            )
            ec2.modify_subnet_attribute(
                SubnetId=subnet["Subnet"]["SubnetId"], MapPublicIpOnLaunch={"Value": True}
            )
        cloudformation = boto3.client("cloudformation", region_name=region)
        cloudformation.create_stack(
            StackName="linc-network",
            TemplateBody=SECURITY_GROUPS.read_text(),
            Parameters=[
                {"ParameterKey": "VpcId", "ParameterValue": vpc},
                {"ParameterKey": "SshCidr", "ParameterValue": SSH_CIDR},
            ],
        )
        stack = cloudformation.describe_stacks(StackName="linc-network")["Stacks"][0]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
        nodes, mlflow = outputs["RayNodesGroupId"], outputs["MlflowServerGroupId"]

        # cluster.yaml with the stack's output in place of its placeholder, through Ray's checks
        # and its network set-up: every node in the one group, no group of Ray's own.
        text = CLUSTER_YAML.read_text()
        (placeholder,) = set(re.findall(r"sg-REPLACE[\w-]*", text))
        config = prepare_config(yaml.safe_load(text.replace(placeholder, nodes)))
        validate_config(config)
        config = _configure_network(config)
        for node_type in config["available_node_types"].values():
            assert node_type["node_config"]["SecurityGroupIds"] == [nodes]
        groups = ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc]}])
        assert sorted(
            g["GroupId"] for g in groups["SecurityGroups"] if g["GroupName"] != "default"
        ) == sorted([nodes, mlflow])
        # SSH from the given CIDR only, every port between the nodes, no port from the world.
        rules = _ingress(ec2, nodes)
        assert _opens_port_to(rules, 22) == {SSH_CIDR}
        assert all(not _opens_port_to(rules, port) for port in (6379, 8265, 10001, 12345))
        (internal,) = [r for r in rules if r["IpProtocol"] == "-1"]
        assert [p["GroupId"] for p in internal["UserIdGroupPairs"]] == [nodes]
        server_rules = _ingress(ec2, mlflow)
        assert _opens_port_to(server_rules, 22) == {SSH_CIDR} and not _opens_port_to(
            server_rules, 5000
        )
        (https,) = [r for r in server_rules if r.get("FromPort") == 5000]
        assert [p["GroupId"] for p in https["UserIdGroupPairs"]] == [nodes]

        # Why the group is made beforehand: the launcher's own group, even with
        # provider.security_group's IpPermissions restricting SSH, opens port 22 to 0.0.0.0/0.
        naive = yaml.safe_load(text)
        for node_type in naive["available_node_types"].values():
            del node_type["node_config"]["SecurityGroupIds"]
        restricted = {
            "IpProtocol": "tcp",
            "FromPort": 22,
            "ToPort": 22,
            "IpRanges": [{"CidrIp": SSH_CIDR}],
        }
        naive["provider"]["security_group"] = {
            "GroupName": "linc-naive",
            "IpPermissions": [restricted],
        }
        naive = _configure_network(prepare_config(naive))
        own = naive["available_node_types"]["head"]["node_config"]["SecurityGroupIds"][0]
        assert "0.0.0.0/0" in _opens_port_to(_ingress(ec2, own), 22)


def test_the_ssh_cidr_parameter_refuses_the_world():
    """CloudFormation checks SshCidr against AllowedPattern before it creates anything (moto does
    not, so the pattern itself is checked here)."""
    parameter = yaml.safe_load(SECURITY_GROUPS.read_text())["Parameters"]["SshCidr"]
    assert "Default" not in parameter
    pattern = re.compile(parameter["AllowedPattern"])
    for accepted in (SSH_CIDR, "10.0.0.0/16", "192.168.1.0/24", "10.0.0.0/8"):
        assert pattern.fullmatch(accepted), accepted
    for refused in ("0.0.0.0/0", "0.0.0.0/1", "128.0.0.0/1", "10.0.0.0/7", "::/0", "0.0.0.0", ""):
        assert not pattern.fullmatch(refused), refused
