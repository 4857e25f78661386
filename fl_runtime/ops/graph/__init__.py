"""Graph replay: a compiled graph's plan (graph_plan.py), its recording (graph_record.py) and its launch list (launch_list.py), for torch.compile(backend="fl")."""
