"""The static HTML report: the site written page by page (report.py), what it reads
(report_inputs.py) and the history it judges and draws in a process of its own (history_judge.py),
its sections and pages (compare_page.py, history_page.py, crosscheck_page.py, breakdown_section.py,
interconnect_section.py), the figures as SVG (plots.py, compare_plots.py, device_roofline.py), the
Jinja2 environment (templating.py), file names (slugs.py) and the templates (templates/)."""
